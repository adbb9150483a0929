"""An execution's events as server-sent events: ``GET /api/executions/{id}/events``.

Each journal event goes out with its cursor as the SSE ``id``, so a client that
reconnects sends ``Last-Event-ID`` and gets every later event exactly once
(browsers' ``EventSource`` does this by itself). Live events (tokens, starts)
have no id: a reconnect neither repeats nor replays them. Every event's ``event``
field is its type, its ``data`` the event as JSON. The stream ends after the
execution's final event; a comment line every ``keepalive`` seconds keeps idle
proxies from closing it meanwhile.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import anyio
from starlette.responses import StreamingResponse
from tether.runtime._executions.stream import checked_until, events
from tether.stores import ConfigurationError

from ._watching import LAST_CURSOR

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from starlette.requests import Request
    from tether.runtime._core.events import Event
    from tether.runtime._executions.stream import Until
    from tether.stores import Store

KEEPALIVE = 15.0
"""Seconds of silence after which the stream sends a comment line."""


def resume_point(request: Request) -> int:
    """The cursor to continue after: ``Last-Event-ID``, else ``?after=``, else 0.

    Raises:
        ConfigurationError: It is not a cursor (a whole number from 0 to `LAST_CURSOR`).
    """
    given = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
    # ASCII digits only (str.isdigit takes "²", which int() refuses), and few enough of them for
    # int() and for the store: a larger number would fail the journal's read, after the 200 went.
    digits = given.lstrip("0") or "0"
    if not (given.isascii() and given.isdigit()) or len(digits) > len(str(LAST_CURSOR)) \
            or int(digits) > LAST_CURSOR:
        shown = given if len(given) <= 40 else given[:40] + "..."
        raise ConfigurationError(
            f"Cannot continue after {shown!r}: send the id of the last event received (Last-Event-ID, "
            f"or ?after=) as a whole number, or 0 for the beginning."
        )
    return int(digits)


def until_of(request: Request) -> Until:
    return checked_until(request.query_params.get("until", "finished"))


def encode(event: Event) -> str:
    """One event as an SSE message."""
    # ASCII: a lone surrogate a store kept (JSON allows it) must not make the stream unsendable.
    data = json.dumps(event.model_dump(mode="json"), separators=(",", ":"))
    head = f"id: {event.cursor}\n" if event.cursor is not None else ""
    return f"{head}event: {event.type}\ndata: {data}\n\n"


async def event_response(store: Store, execution_id: str, *, after: int, until: Until,
                         keepalive: float = KEEPALIVE,
                         allowed: Callable[[], Awaitable[bool]] | None = None) -> StreamingResponse:
    """The streaming response, for an execution the caller found (an unknown one is its 404).

    ``allowed`` is asked again every ``keepalive`` seconds: once it says no (its
    token was revoked), the stream ends, and the client's reconnect is refused.
    """

    async def body() -> AsyncIterator[str]:
        yield "retry: 2000\n\n"
        checked = anyio.current_time()
        async with events(store, execution_id, after=after, until=until) as stream:
            iterator = aiter(stream)
            while True:
                event = None
                with anyio.move_on_after(keepalive):
                    try:
                        event = await anext(iterator)
                    except StopAsyncIteration:
                        return
                if allowed is not None and anyio.current_time() - checked >= keepalive:
                    if not await allowed():
                        return
                    checked = anyio.current_time()
                yield ": keepalive\n\n" if event is None else encode(event)

    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return StreamingResponse(body(), media_type="text/event-stream", headers=headers)
