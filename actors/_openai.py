"""`OpenAIChatLLM`: any OpenAI-compatible chat-completions endpoint, over httpx.

httpx runs on anyio, so the adapter works under asyncio and trio alike.
"""

from __future__ import annotations

import json
import os
import random
from typing import TYPE_CHECKING, Any, Self

import anyio
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

    Args:
        model: The model name sent with each request.
        base_url: The API root, up to and including ``/v1``.
        api_key: Sent as a bearer token (default: ``$OPENAI_API_KEY``; none if unset).
        timeout: httpx's timeout for each phase of an attempt (connect, each read, write, pool).
        max_retries: Attempts after the first.
        backoff: The first retry's delay in seconds; each next one doubles, to at most 30.
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
        if self._client is not None:
            return _reply(await self._post(self._client, body))
        async with self._new_client() as client:
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
                try:
                    return response.json()
                except ValueError as exc:
                    raise LLMError(f"{self!r} answered 200 with a body that is not JSON: {response.text[:500]}",
                                   status=200) from exc
            retried = response.status_code in RETRIED_STATUSES or response.status_code >= 500
            if not retried or last:
                raise LLMError(
                    f"{self!r} answered {response.status_code} (attempt {attempt + 1}): {response.text[:500]}",
                    status=response.status_code,
                )
            await anyio.sleep(self._delay(attempt, response.headers.get("retry-after")))
        raise AssertionError("unreachable")  # pragma: no cover

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
        raw = function.get("arguments") or "{}"
        try:
            arguments = json.loads(raw)
        except json.JSONDecodeError:
            arguments = raw
        calls.append(ToolCall(function.get("name", ""), arguments if isinstance(arguments, dict) else raw,
                              id=call.get("id")))
    return AssistantMessage(content=message.get("content"), tool_calls=calls)
