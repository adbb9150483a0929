"""A real HTTP server speaking the chat-completions protocol, scripted by the test.

The scripted server of `_scripted_server`, under ``/v1``: a streamed answer's
events are ``data:`` lines ending with ``data: [DONE]``, the way a model
streams its reply.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from . import _scripted_server


@dataclass
class Answer(_scripted_server.Answer):
    """An answer; its ``events`` are sent as ``data:`` each, or as a ``:`` comment if a str."""

    done: bool = True
    """With ``events``: end with ``data: [DONE]``."""


def text(content: str) -> Answer:
    return Answer(body={"choices": [{"message": {"role": "assistant", "content": content}}]})


def calls(*pairs: tuple[str, str]) -> Answer:
    """Tool calls, each ``(name, arguments as JSON text)``."""
    return Answer(body={"choices": [{"message": {
        "role": "assistant", "content": None,
        "tool_calls": [{"id": f"srv_{i}", "type": "function", "function": {"name": n, "arguments": a}}
                       for i, (n, a) in enumerate(pairs)],
    }}]})


def streamed(answer: Answer, *, size: int = 4, drop_after: int | None = None, end: bool = True) -> Answer:
    """``answer``'s reply (`text` or `calls`) as chat-completion chunks, the way a model streams it.

    The text comes in pieces of ``size`` characters; each call's id and name come
    first, then its arguments in pieces of ``size``, the calls' pieces interleaved.
    Comments and a usage chunk (no choices) come along, as real servers send
    them. ``end=False`` stops before the finish_reason and ``[DONE]`` (the body
    ends cleanly, the reply does not).
    """
    message = answer.body["choices"][0]["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": "chatcmpl-1", "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    events: list[Any] = [": the model is thinking", chunk({"role": "assistant", "content": ""})]
    content = message.get("content") or ""
    events += [chunk({"content": content[i:i + size]}) for i in range(0, len(content), size)]
    pieces: list[list[dict[str, Any]]] = []
    for index, call in enumerate(message.get("tool_calls") or []):
        arguments = call["function"]["arguments"]
        pieces.append([{"index": index, "id": call["id"], "type": "function",
                        "function": {"name": call["function"]["name"], "arguments": ""}}]
                      + [{"index": index, "function": {"arguments": arguments[i:i + size]}}
                         for i in range(0, len(arguments), size)])
    for place in range(max(map(len, pieces), default=0)):
        events += [chunk({"tool_calls": [p[place]]}) for p in pieces if place < len(p)]
    if end:
        events += [chunk({}, "tool_calls" if pieces else "stop"), {"choices": [], "usage": {"total_tokens": 9}}]
    return Answer(events=events, drop_after=drop_after, done=end)


def sse(event: Any) -> bytes:
    return (f": {event}\n\n" if isinstance(event, str) else f"data: {json.dumps(event)}\n\n").encode()


class ChatServer(_scripted_server.ScriptedServer[Answer]):
    url_suffix = "/v1"

    def no_answer_left(self) -> Answer:
        return Answer(500, {"error": "no answer left"})

    def frame(self, event: Any) -> bytes:
        return sse(event)

    def frames(self, answer: Answer) -> list[bytes]:
        return super().frames(answer) + ([b"data: [DONE]\n\n"] if answer.done else [])
