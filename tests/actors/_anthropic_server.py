"""A real HTTP server speaking Anthropic's Messages API (``POST /v1/messages``), scripted by the test.

The scripted server of `_scripted_server`. Like the API, it checks each request
first and answers a malformed one with the API's error (401 without
``x-api-key``, 400 when the roles do not alternate, a ``tool_result`` answers no
``tool_use`` of the turn before, a tool has no ``input_schema``...), so an agent
whose conversation is put in the wrong shape fails against it. A `streamed`
answer is sent as the API's server-sent events (``event:`` and ``data:`` lines).
"""

from __future__ import annotations

import json
import re
from email.message import Message
from typing import Any, ClassVar

from . import _scripted_server

Answer = _scripted_server.Answer

Event = tuple[str, dict[str, Any]] | str
"""One server-sent event: ``(event name, data)``, or a comment line if a str."""


def message(*blocks: dict[str, Any], stop_reason: str | None = None) -> dict[str, Any]:
    uses = any(b["type"] == "tool_use" for b in blocks)
    return {"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-test",
            "content": list(blocks), "stop_reason": stop_reason or ("tool_use" if uses else "end_turn"),
            "stop_sequence": None, "usage": {"input_tokens": 12, "output_tokens": 7}}


def text(content: str) -> Answer:
    return Answer(body=message({"type": "text", "text": content}))


def tool_use(*calls: tuple[str, Any], say: str | None = None) -> Answer:
    """Tool calls, each ``(name, input)``, their ids ``toolu_0``, ``toolu_1``..., after the text ``say``.

    An input that is a str is streamed as it is (for arguments that are not JSON); `streamed` only.
    """
    blocks = [{"type": "text", "text": say}] if say else []
    blocks += [{"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": given}
               for i, (name, given) in enumerate(calls)]
    return Answer(body=message(*blocks))


def error(status: int, kind: str, text: str, headers: dict[str, str] | None = None) -> Answer:
    """An error answer as the API sends one: ``{"type": "error", "error": {"type", "message"}}``."""
    return Answer(status, {"type": "error", "error": {"type": kind, "message": text}},
                  {"request-id": "req_test", **(headers or {})})


def streamed(answer: Answer, *, size: int = 4, drop_after: int | None = None, end: bool = True) -> Answer:
    """``answer``'s message (`text` or `tool_use`) as the events a streaming model sends.

    message_start, then per block a content_block_start, its deltas (text in
    pieces of ``size`` characters, a tool's input as ``input_json_delta``
    pieces), a content_block_stop; pings and a comment come along as the API
    sends them; then message_delta (the stop_reason) and message_stop.
    ``end=False`` stops before those two (the body ends cleanly, the reply does not).
    """
    whole = answer.body
    events: list[Event] = [
        ("message_start", {"type": "message_start",
                           "message": {**whole, "content": [], "stop_reason": None,
                                       "usage": {"input_tokens": 12, "output_tokens": 1}}}),
        ("ping", {"type": "ping"}),
        "keep-alive",
    ]
    for index, block in enumerate(whole["content"]):
        if block["type"] == "text":
            events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                                   "content_block": {"type": "text", "text": ""}}))
            pieces = [{"type": "text_delta", "text": block["text"][i:i + size]}
                      for i in range(0, len(block["text"]), size)]
        else:
            events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                                   "content_block": {"type": "tool_use", "id": block["id"],
                                                                     "name": block["name"], "input": {}}}))
            raw = block["input"] if isinstance(block["input"], str) else json.dumps(block["input"])
            pieces = [{"type": "input_json_delta", "partial_json": ""}]
            pieces += [{"type": "input_json_delta", "partial_json": raw[i:i + size]} for i in range(0, len(raw), size)]
        events += [("content_block_delta", {"type": "content_block_delta", "index": index, "delta": piece})
                   for piece in pieces]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(("ping", {"type": "ping"}))
    if end:
        events += [("message_delta", {"type": "message_delta",
                                      "delta": {"stop_reason": whole["stop_reason"], "stop_sequence": None},
                                      "usage": {"output_tokens": 7}}),
                   ("message_stop", {"type": "message_stop"})]
    return Answer(events=events, drop_after=drop_after)


def sse(event: Event) -> bytes:
    if isinstance(event, str):
        return f": {event}\n\n".encode()
    name, data = event
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


TOOL_USE_ID = re.compile(r"^[a-zA-Z0-9_-]+$")


def refusal(headers: dict[str, str], body: Any) -> tuple[int, str, str] | None:
    """What the API would refuse in this request (status, error type, message), or None."""
    if not headers.get("x-api-key"):
        return 401, "authentication_error", "x-api-key header is required"
    if not headers.get("anthropic-version"):
        return 400, "invalid_request_error", "anthropic-version: header is required"
    if not headers.get("content-type", "").startswith("application/json"):
        return 400, "invalid_request_error", "content-type: must be application/json"
    if not isinstance(body, dict):
        return 400, "invalid_request_error", "The request body is not a JSON object"
    for name, kind in (("model", str), ("max_tokens", int), ("messages", list)):
        if not isinstance(body.get(name), kind):
            return 400, "invalid_request_error", f"{name}: Field required"
    system = body.get("system")
    if system is not None and not (isinstance(system, str) or (
            isinstance(system, list) and all(b.get("type") == "text" for b in system))):
        return 400, "invalid_request_error", "system: Input should be a valid string or a list of text blocks"
    for i, tool in enumerate(body.get("tools") or []):
        if set(tool) - {"name", "description", "input_schema", "cache_control"} or not isinstance(
                tool.get("input_schema"), dict) or tool["input_schema"].get("type") != "object":
            return 400, "invalid_request_error", f"tools.{i}.input_schema: Field required"
    messages = body["messages"]
    if not messages:
        return 400, "invalid_request_error", "messages: at least one message is required"
    previous_uses: set[str] = set()
    for i, turn in enumerate(messages):
        role = turn.get("role")
        if role not in ("user", "assistant"):
            return 400, "invalid_request_error", f'messages.{i}.role: Input should be "user" or "assistant"'
        if i == 0 and role != "user":
            return 400, "invalid_request_error", "messages: first message must use the \"user\" role"
        if i > 0 and role == messages[i - 1]["role"]:
            return 400, "invalid_request_error", (f'messages: roles must alternate between "user" and "assistant", '
                                                  f'but found multiple "{role}" roles in a row')
        content = turn.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list) or not blocks:
            return 400, "invalid_request_error", f"messages.{i}: all messages must have non-empty content"
        results = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
        if role == "user" and previous_uses != set(results):
            return 400, "invalid_request_error", (
                f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                f"{sorted(previous_uses - set(results))}, or results without a `tool_use`: "
                f"{sorted(set(results) - previous_uses)}")
        if results and any(b.get("type") != "tool_result" for b in blocks[:len(results)]):
            return 400, "invalid_request_error", f"messages.{i}: tool_result blocks must come first"
        previous_uses = set()
        for j, block in enumerate(blocks):
            kind = block.get("type")
            allowed = ("text", "tool_use") if role == "assistant" else ("text", "tool_result")
            if kind not in allowed:
                return 400, "invalid_request_error", f"messages.{i}.content.{j}: unexpected block type {kind!r}"
            if kind == "text" and not block.get("text"):
                return 400, "invalid_request_error", f"messages.{i}.content.{j}: text content blocks must be non-empty"
            if kind == "tool_use":
                if not (isinstance(block.get("id"), str) and TOOL_USE_ID.match(block["id"])
                        and isinstance(block.get("name"), str) and isinstance(block.get("input"), dict)):
                    return 400, "invalid_request_error", f"messages.{i}.content.{j}: a malformed tool_use block"
                previous_uses.add(block["id"])
            if kind == "tool_result" and not isinstance(block.get("content"), str | list):
                return 400, "invalid_request_error", f"messages.{i}.content.{j}.content: Input should be a string"
    if messages[-1]["role"] == "assistant" and previous_uses:
        return 400, "invalid_request_error", "messages: the last message's tool_use blocks have no results"
    return None


class AnthropicServer(_scripted_server.ScriptedServer[Answer]):
    # url_suffix stays "": AnthropicLLM's base_url is the root, it puts /v1/messages after it.
    stream_headers: ClassVar[dict[str, str]] = {"content-type": "text/event-stream; charset=utf-8", "request-id": "req_stream"}

    def no_answer_left(self) -> Answer:
        return error(500, "api_error", "no answer left")

    def frame(self, event: Event) -> bytes:
        return sse(event)

    def kept_headers(self, headers: Message) -> dict[str, str]:
        return {k.lower(): v for k, v in headers.items()}  # as `refusal` looks them up

    def answer(self, path: str, headers: dict[str, str], body: Any) -> Answer:
        refused = refusal(headers, body) if path == "/v1/messages" else (
            404, "not_found_error", f"Not found: {path}")
        return error(*refused) if refused is not None else super().answer(path, headers, body)
