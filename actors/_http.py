"""What tether's HTTP LLM clients share: a connection pool held by ``async with``, and retried requests.

httpx runs on anyio, so the clients work under asyncio and trio alike. A client
says how its provider's requests and replies look (`HTTPLLM._body`,
`HTTPLLM._reply`, `HTTPLLM._read_stream`); sending a request, retrying it, and
reading the status of a refusal is the same for every provider.
"""

from __future__ import annotations

import logging
import random
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Self

import anyio
from tether.stores import ConfigurationError, TetherError

if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import TracebackType

    import httpx
    from pydantic import JsonValue

    from ._messages import AssistantMessage, Message, ToolSpec


log = logging.getLogger("tether.actors")

RETRIED_STATUSES = frozenset({408, 409, 429})
"""Answers below 500 that say "try again": a timeout, a conflict, a rate limit (and every 5xx)."""


class LLMError(TetherError):
    """The endpoint refused the request, or kept failing after every retry."""

    def __init__(self, message: str, *, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after
        """Seconds the endpoint asked to wait (its ``Retry-After``), when it said."""


class IncompleteStream(Exception):
    """A streamed answer ended early: retried as a transport error is."""


class StreamedError(Exception):
    """An error event of an overloaded or failing server in a stream: retried as its status is."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class HTTPLLM(ABC):
    """An `LLM` that POSTs each turn to ``{base_url}{path}``, retrying what can be retried.

    Retries transport errors (connection refused, timeouts) and the answers in
    `RETRIED_STATUSES` and every 5xx, up to ``max_retries`` times, waiting
    ``Retry-After`` when the server says so and an exponential, jittered delay
    otherwise. With ``stream=True`` the whole request, its stream included, is
    the unit of retry.
    """

    path: ClassVar[str]
    """Where the requests go, below ``base_url``."""
    provider: ClassVar[str]
    """Who serves the model, as telemetry names it (``gen_ai.provider.name``)."""

    def __init__(self, model: str, *, base_url: str, api_key: str | None, timeout: float, max_retries: int,
                 backoff: float, stream: bool, params: dict[str, JsonValue]) -> None:
        if max_retries < 0 or timeout <= 0:
            raise ConfigurationError(f"max_retries={max_retries} and timeout={timeout} must be 0 or more, and positive.")
        self.model = model
        self.base_url = base_url
        self.api_key = api_key
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.stream = stream
        self.params = params
        self._client: httpx.AsyncClient | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.model!r}, base_url={self.base_url!r})"

    async def __aenter__(self) -> Self:
        self._client = self._new_client()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    @abstractmethod
    def _headers(self) -> dict[str, str]:
        """The headers of every request (the credentials among them)."""

    @abstractmethod
    def _body(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> dict[str, Any]:
        """The request body for this conversation, before ``params`` and ``stream``."""

    @abstractmethod
    def _reply(self, data: Any) -> AssistantMessage:
        """The reply in a 200 answer's JSON body."""

    @abstractmethod
    async def _read_stream(self, response: httpx.Response) -> AssistantMessage:
        """The reply in a 200 answer to a streamed request, its text emitted as it comes."""

    def _error_text(self, response: httpx.Response) -> str:
        """What an error answer says, for the `LLMError` it raises."""
        return response.text[:500]

    def _new_client(self) -> httpx.AsyncClient:
        import httpx  # here, not at import: with click and rich installed, httpx imports its CLI too

        return httpx.AsyncClient(base_url=self.base_url, headers=self._headers(), timeout=self.timeout)

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> AssistantMessage:
        body = {**self._body(messages, tools), **self.params}
        if self.stream:
            body["stream"] = True
        if self._client is not None:
            return await self._ask(self._client, body)
        async with self._new_client() as client:
            return await self._ask(client, body)

    async def _ask(self, client: httpx.AsyncClient, body: dict[str, Any]) -> AssistantMessage:
        if self.stream:
            return await self._post_streamed(client, body)
        return self._reply(await self._post(client, body))

    async def _post(self, client: httpx.AsyncClient, body: dict[str, Any]) -> Any:
        import httpx

        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            try:
                response = await client.post(self.path, json=body)
            except httpx.TransportError as exc:
                if last:
                    raise LLMError(f"{self!r}: {type(exc).__name__} after {attempt + 1} attempts: {exc}") from exc
                log.warning("%r: %s on attempt %d; retrying", self, type(exc).__name__, attempt + 1)
                await anyio.sleep(self._delay(attempt, None))
                continue
            if response.status_code == 200:
                return self._json(response)
            self._refuse(response, attempt, last)
            log.warning("%r: HTTP %d on attempt %d; retrying", self, response.status_code, attempt + 1)
            await anyio.sleep(self._delay(attempt, response.headers.get("retry-after")))
        raise AssertionError("unreachable")  # pragma: no cover

    async def _post_streamed(self, client: httpx.AsyncClient, body: dict[str, Any]) -> AssistantMessage:
        """`_post` for ``stream=True``: the whole request is the unit of retry, the stream included."""
        import httpx

        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            retry_after: str | None = None
            try:
                async with client.stream("POST", self.path, json=body) as response:
                    if response.status_code == 200:
                        return await self._read_stream(response)
                    await response.aread()
                    self._refuse(response, attempt, last)
                    retry_after = response.headers.get("retry-after")
            except (httpx.TransportError, IncompleteStream) as exc:
                if last:
                    raise LLMError(f"{self!r}: {type(exc).__name__} after {attempt + 1} attempts: {exc}") from exc
            except StreamedError as exc:
                if last:
                    raise LLMError(f"{self!r} streamed an error after {attempt + 1} attempts: {exc}",
                                   status=exc.status) from exc
            await anyio.sleep(self._delay(attempt, retry_after))
        raise AssertionError("unreachable")  # pragma: no cover

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
                f"{self!r} answered {response.status_code} (attempt {attempt + 1}): {self._error_text(response)}",
                status=response.status_code, retry_after=_seconds(response.headers.get("retry-after")),
            )

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        asked = _seconds(retry_after)
        if asked is not None:
            return min(asked, 60.0)
        return min(self.backoff * 2.0**attempt, 30.0) * random.uniform(0.5, 1.0)


def _seconds(retry_after: str | None) -> float | None:
    """A ``Retry-After`` of seconds, or None (absent, or an HTTP date: our own schedule then)."""
    if retry_after is None:
        return None
    try:
        return max(float(retry_after), 0.0)
    except ValueError:
        return None
