"""`OpenAIChatLLM`: any OpenAI-compatible chat-completions endpoint, over httpx.

httpx runs on anyio, so the adapter works under asyncio and trio alike.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

import anyio
from tether.runtime import TokenDelta, emit
from tether.stores import ConfigurationError, TetherError

from ._messages import AssistantMessage, Message, SystemMessage, ToolCall, ToolMessage, ToolSpec, UserMessage

if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import TracebackType

    import httpx
    from pydantic import JsonValue

RETRIED_STATUSES = frozenset({408, 409, 429})
"""Answers below 500 that say "try again": a timeout, a conflict, a rate limit (and every 5xx)."""


class LLMError(TetherError):
    """The endpoint refused the request, or kept failing after every retry."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class OpenAIChatLLM:
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
        self.model = model
        self.base_url: str = base_url.rstrip("/")
        self.api_key: str | None = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.timeout = timeout
        if max_retries < 0 or timeout <= 0:
            raise ConfigurationError(f"max_retries={max_retries} and timeout={timeout} must be 0 or more, and positive.")
        self.max_retries = max_retries
        self.backoff = backoff
        self.stream = stream
        self.params = params
        self._client: httpx.AsyncClient | None = None

    def __repr__(self) -> str:
        return f"OpenAIChatLLM({self.model!r}, base_url={self.base_url!r})"

    async def __aenter__(self) -> Self:
        self._client = self._new_client()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    def _new_client(self) -> httpx.AsyncClient:
        import httpx  # here, not at import: with click and rich installed, httpx imports its CLI too

        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return httpx.AsyncClient(base_url=self.base_url, headers=headers, timeout=self.timeout)

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> AssistantMessage:
        body: dict[str, Any] = {"model": self.model, "messages": [_wire(m) for m in messages], **self.params}
        if tools:
            body["tools"] = [
                {"type": "function",
                 "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
                for t in tools
            ]
        if self.stream:
            body["stream"] = True
        if self._client is not None:
            return await self._ask(self._client, body)
        async with self._new_client() as client:
            return await self._ask(client, body)

    async def _ask(self, client: httpx.AsyncClient, body: dict[str, Any]) -> AssistantMessage:
        if self.stream:
            return await self._post_streamed(client, body)
        return _reply(await self._post(client, body))

    async def _post(self, client: httpx.AsyncClient, body: dict[str, Any]) -> Any:
        import httpx

        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            try:
                response = await client.post("/chat/completions", json=body)
            except httpx.TransportError as exc:
                if last:
                    raise LLMError(f"{self!r}: {type(exc).__name__} after {attempt + 1} attempts: {exc}") from exc
                await anyio.sleep(self._delay(attempt, None))
                continue
            if response.status_code == 200:
                return self._json(response)
            self._refuse(response, attempt, last)
            await anyio.sleep(self._delay(attempt, response.headers.get("retry-after")))
        raise AssertionError("unreachable")  # pragma: no cover

    async def _post_streamed(self, client: httpx.AsyncClient, body: dict[str, Any]) -> AssistantMessage:
        """`_post` for ``stream=True``: the whole request is the unit of retry, the stream included."""
        import httpx

        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            retry_after: str | None = None
            try:
                async with client.stream("POST", "/chat/completions", json=body) as response:
                    if response.status_code == 200:
                        return await self._read_stream(response)
                    await response.aread()
                    self._refuse(response, attempt, last)
                    retry_after = response.headers.get("retry-after")
            except (httpx.TransportError, IncompleteStream) as exc:
                if last:
                    raise LLMError(f"{self!r}: {type(exc).__name__} after {attempt + 1} attempts: {exc}") from exc
            await anyio.sleep(self._delay(attempt, retry_after))
        raise AssertionError("unreachable")  # pragma: no cover

    async def _read_stream(self, response: httpx.Response) -> AssistantMessage:
        """The reply in a 200 answer's server-sent events, each piece of text emitted as it comes."""
        import httpx

        if not response.headers.get("content-type", "").lower().startswith("text/event-stream"):
            # A server that does not stream answers with the whole completion.
            await response.aread()
            reply = _reply(self._json(response))
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

    def _json(self, response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError as exc:
            raise LLMError(f"{self!r} answered 200 with a body that is not JSON: {response.text[:500]}",
                           status=200) from exc

    def _refuse(self, response: httpx.Response, attempt: int, last: bool) -> None:
        """Raise `LLMError` for an error answer, unless it is retried and retries remain."""
        retried = response.status_code in RETRIED_STATUSES or response.status_code >= 500
        if not retried or last:
            raise LLMError(
                f"{self!r} answered {response.status_code} (attempt {attempt + 1}): {response.text[:500]}",
                status=response.status_code,
            )

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        if retry_after is not None:
            try:
                return min(max(float(retry_after), 0.0), 60.0)
            except ValueError:
                pass  # an HTTP date: fall back to our own schedule
        return min(self.backoff * 2.0**attempt, 30.0) * random.uniform(0.5, 1.0)


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


def _reply(data: Any) -> AssistantMessage:
    """The assistant message in a chat-completions answer."""
    try:
        message = data["choices"][0]["message"]
    except (KeyError, IndexError, TypeError) as exc:
        raise LLMError(f"The answer has no choices[0].message: {json.dumps(data)[:500]}") from exc
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function", {})
        calls.append(_call(function.get("name", ""), function.get("arguments"), call.get("id")))
    return AssistantMessage(content=message.get("content"), tool_calls=calls)


def _call(name: str, raw: str | None, call_id: str | None) -> ToolCall:
    """A tool call, its arguments a dict when they are a JSON object, else the text the model sent."""
    raw = raw or "{}"
    try:
        arguments = json.loads(raw)
    except json.JSONDecodeError:
        arguments = raw
    return ToolCall(name, arguments if isinstance(arguments, dict) else raw, id=call_id)


class IncompleteStream(Exception):
    """A streamed answer ended early: retried as a transport error is."""


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
