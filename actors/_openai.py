"""`OpenAIChatLLM`: any OpenAI-compatible chat-completions endpoint, over httpx.

httpx runs on anyio, so the adapter works under asyncio and trio alike.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tether.runtime import TokenDelta, emit
from tether.runtime.telemetry import llm_usage

from ._http import HTTPLLM, IncompleteStream, LLMError
from ._messages import AssistantMessage, Message, SystemMessage, ToolCall, ToolMessage, ToolSpec, UserMessage

if TYPE_CHECKING:
    from collections.abc import Sequence

    import httpx
    from pydantic import JsonValue


class OpenAIChatLLM(HTTPLLM):
    """An `LLM` that calls ``POST {base_url}/chat/completions``.

    Retries 408, 409, 429 and every 5xx answer, and transport errors
    (connection refused, timeouts), up to ``max_retries`` times, waiting ``Retry-After`` when
    the server says so and an exponential, jittered delay otherwise. Any other
    error answer raises `LLMError` at once, with the server's message.

    Use ``async with`` to keep one connection pool across calls; without it,
    each call opens and closes its own.

    With ``stream=True`` the request asks for server-sent events, and each piece
    of the reply's text is published as a live `TokenDelta` to whoever follows
    the run (``agent.stream``, `tether.runtime.events`) as it arrives; tool calls
    are put together from their pieces. The reply returned (and journaled) is
    the same message a non-streamed call returns, its text the concatenation of
    the tokens. Failures before the body starts are retried as above; so is a
    transport error in the middle of the stream, or a stream that ends with
    neither ``data: [DONE]`` nor a ``finish_reason``: the whole request is sent
    again. The live tokens of a failed attempt were already sent (a follower may
    see a reply start twice); the journal holds only the final attempt's message.

    Args:
        model: The model name sent with each request.
        base_url: The API root, up to and including ``/v1``.
        api_key: Sent as a bearer token (default: ``$OPENAI_API_KEY``; none if unset).
        timeout: httpx's timeout for each phase of an attempt (connect, each read, write, pool).
        max_retries: Attempts after the first.
        backoff: The first retry's delay in seconds; each next one doubles, to at most 30.
        stream: Stream the reply (server-sent events), publishing its text as live tokens.
        params: More fields for the request body (``temperature=0``).

    Example:
        ```python
        async with OpenAIChatLLM("gpt-4o-mini") as llm:
            agent = Agent(name="refund-bot", llm=llm, tools=[approve_refund], store=store)
            result = await agent.run("Process a $50k refund.", execution_id="job-1")
        ```
    """

    path = "/chat/completions"
    provider = "openai"

    def __init__(
        self,
        model: str,
        *,
        base_url: str = "https://api.openai.com/v1",
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        stream: bool = False,
        **params: JsonValue,
    ) -> None:
        super().__init__(model, base_url=base_url.rstrip("/"),
                         api_key=api_key if api_key is not None else os.environ.get("OPENAI_API_KEY"),
                         timeout=timeout, max_retries=max_retries, backoff=backoff, stream=stream, params=params)

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def _body(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": [_wire(m) for m in messages]}
        if tools:
            body["tools"] = [
                {"type": "function",
                 "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
                for t in tools
            ]
        return body

    def _reply(self, data: Any) -> AssistantMessage:
        return _message(data)

    async def _read_stream(self, response: httpx.Response) -> AssistantMessage:
        """The reply in a 200 answer's server-sent events, each piece of text emitted as it comes."""
        import httpx

        if not response.headers.get("content-type", "").lower().startswith("text/event-stream"):
            # A server that does not stream answers with the whole completion.
            await response.aread()
            reply = self._reply(self._json(response))
            if reply.content:
                emit(TokenDelta, text=reply.content)
            return reply
        parts = _Parts()
        failure: LLMError | None = None
        data: list[str] = []  # the data lines of the event being read
        try:
            # The body is read to its end even after [DONE] or a failure, never left midway:
            # the connection can go back to the pool, and httpx's nested generators finish.
            async for line in response.aiter_lines():
                if parts.done or failure is not None:
                    continue
                if line.startswith("data:"):
                    data.append(line[5:].removeprefix(" "))
                elif not line and data:  # a blank line ends an event
                    failure = self._add_event(parts, "\n".join(data))
                    data.clear()
                # else a comment (":"), another field (event:, id:, retry:), or a blank line between events
            if data and not parts.done and failure is None:
                failure = self._add_event(parts, "\n".join(data))  # the last event, with no blank line after it
        except httpx.TransportError:
            if failure is None and not (parts.done or parts.finished):
                raise
            # else the reply was whole (or refused) already
        if failure is not None:
            raise failure
        if not (parts.done or parts.finished):
            raise IncompleteStream("the stream ended with neither data: [DONE] nor a finish_reason")
        return parts.message()

    def _add_event(self, parts: _Parts, data: str) -> LLMError | None:
        """Add one event's data to the reply; the error to raise if it is one."""
        if data.strip() == "[DONE]":
            parts.done = True
            return None
        try:
            chunk = json.loads(data)
        except ValueError:
            return LLMError(f"{self!r} streamed an event that is not JSON: {data[:500]}", status=200)
        if isinstance(chunk, dict) and chunk.get("error"):
            return LLMError(f"{self!r} streamed an error: {json.dumps(chunk['error'])[:500]}", status=200)
        try:
            parts.add(chunk)
        except (AttributeError, TypeError, KeyError):
            return LLMError(f"{self!r} streamed a chunk that is not a chat-completion chunk: {data[:500]}",
                            status=200)
        return None


def _wire(message: Message) -> dict[str, Any]:
    """One message in the chat-completions format."""
    if isinstance(message, SystemMessage | UserMessage):
        return {"role": message.role, "content": message.content}
    if isinstance(message, ToolMessage):
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    wire: dict[str, Any] = {"role": "assistant", "content": message.content}
    if message.tool_calls:
        wire["tool_calls"] = [
            {"id": call.id, "type": "function",
             "function": {"name": call.name,
                          "arguments": call.arguments if isinstance(call.arguments, str)
                          else json.dumps(call.arguments)}}
            for call in message.tool_calls
        ]
    return wire


def _message(data: Any) -> AssistantMessage:
    """The assistant message in a chat-completions answer."""
    try:
        message = data["choices"][0]["message"]
    except (KeyError, IndexError, TypeError) as exc:
        raise LLMError(f"The answer has no choices[0].message: {json.dumps(data)[:500]}") from exc
    _usage(data, [str(c.get("finish_reason")) for c in data["choices"] if isinstance(c, dict) and c.get("finish_reason")])
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function", {})
        calls.append(_call(function.get("name", ""), function.get("arguments"), call.get("id")))
    return AssistantMessage(content=message.get("content"), tool_calls=calls)


def _usage(data: dict[str, Any], finish_reasons: list[str] | None) -> None:
    """What an answer (or a streamed chunk) says about itself, for telemetry."""
    usage = data.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    llm_usage(input_tokens=usage.get("prompt_tokens"), output_tokens=usage.get("completion_tokens"),
              finish_reasons=finish_reasons or None, response_model=data.get("model"), response_id=data.get("id"))


def _call(name: str, raw: str | None, call_id: str | None) -> ToolCall:
    """A tool call, its arguments a dict when they are a JSON object, else the text the model sent."""
    raw = raw or "{}"
    try:
        arguments = json.loads(raw)
    except json.JSONDecodeError:
        arguments = raw
    return ToolCall(name, arguments if isinstance(arguments, dict) else raw, id=call_id)


@dataclass
class _CallParts:
    id: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class _Parts:
    """A streamed reply, put together from its chunks (``choices[0].delta``)."""

    text: list[str] = field(default_factory=list)
    calls: dict[int, _CallParts] = field(default_factory=dict)
    finished: bool = False
    """A ``finish_reason`` came: the reply is whole even if ``[DONE]`` does not."""
    done: bool = False
    """``data: [DONE]`` came."""

    def add(self, chunk: Any) -> None:
        choices = chunk.get("choices") if isinstance(chunk, dict) else None
        if isinstance(chunk, dict) and (chunk.get("usage") or any(
                isinstance(c, dict) and c.get("finish_reason") for c in choices or [])):
            _usage(chunk, [str(c["finish_reason"]) for c in choices or [] if isinstance(c, dict)
                           and c.get("finish_reason")])
        for choice in choices or []:  # a usage chunk has none
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            piece = delta.get("content")
            if isinstance(piece, str) and piece:
                self.text.append(piece)
                emit(TokenDelta, text=piece)
            for position, call in enumerate(delta.get("tool_calls") or []):
                if not isinstance(call, dict):
                    continue
                parts = self.calls.setdefault(call.get("index", position), _CallParts())
                function = call.get("function") or {}
                # The id and name come with a call's first piece; some servers repeat them.
                parts.id = parts.id or call.get("id")
                parts.name = parts.name or function.get("name") or ""
                if function.get("arguments"):
                    parts.arguments.append(function["arguments"])
            if choice.get("finish_reason"):
                self.finished = True

    def message(self) -> AssistantMessage:
        calls = [_call(parts.name, "".join(parts.arguments), parts.id)
                 for _, parts in sorted(self.calls.items())]
        return AssistantMessage(content="".join(self.text) or None, tool_calls=calls)
