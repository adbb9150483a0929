"""Hand a function to aiosqlite's connection thread straight from either backend.

aiosqlite's own `_execute` wraps the outcome in an asyncio future, which under
trio means a second thread (the store's private asyncio loop) between the
caller and the connection. Instead, the function goes onto the connection's
queue with a `_Reply` that the worker thread completes, and that wakes the
waiting task on whichever loop it runs: one crossing each way, on asyncio and
on trio alike. The connection is opened and closed through aiosqlite as usual.

The worker's side of the protocol (aiosqlite 0.22): it takes
``(future, function)`` from ``Connection._tx``, runs ``function()``, then calls
``future.get_loop().call_soon_threadsafe(set_result_or_exception, future, value)``,
whose callback checks ``future.done()`` and then sets the value.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import anyio
import anyio.lowlevel

from ._bridge import _threadsafe_waker, rearm_cancellation

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Callable

    import aiosqlite

T = TypeVar("T")


class _Reply(Generic[T]):
    """Quacks like the asyncio future aiosqlite's worker completes; wakes one task."""

    __slots__ = ("_done", "_error", "_result", "_wake", "event")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self._wake = _threadsafe_waker(self.event)
        self._done = False
        self._result: Any = None
        self._error: BaseException | None = None

    # -- called on the worker thread --------------------------------------------------

    def get_loop(self) -> _Reply[T]:
        return self

    def call_soon_threadsafe(self, callback: Callable[[_Reply[T], Any], None], _: Any, value: Any) -> None:
        callback(self, value)  # aiosqlite's set_result / set_exception, run right here
        try:
            self._wake()
        except Exception:  # noqa: BLE001, S110 - the waiting loop is gone; nobody is left to wake
            pass

    def done(self) -> bool:
        return self._done

    def set_result(self, result: T) -> None:
        self._result, self._done = result, True

    def set_exception(self, error: BaseException) -> None:
        self._error, self._done = error, True

    # -- called by the waiting task --------------------------------------------------

    def outcome(self) -> T:
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[no-any-return]


async def run_on_worker(
    conn: aiosqlite.Connection, fn: Callable[[sqlite3.Connection], T], *, commits: bool
) -> T:
    """Run ``fn(connection)`` on the connection's thread and return its result.

    Once queued, ``fn`` runs to its end on that thread whatever happens to the
    caller. So a cancelled caller of a function that ``commits`` waits for the
    outcome and returns it, and its next await raises the cancellation; a
    cancelled read just leaves.
    """
    await anyio.lowlevel.checkpoint_if_cancelled()
    reply: _Reply[T] = _Reply()
    conn._tx.put_nowait((reply, partial(fn, conn._conn)))  # type: ignore[arg-type]
    try:
        await reply.event.wait()
    except anyio.get_cancelled_exc_class():
        if not commits:
            raise
        # A shield stops anyio's cancellation, not asyncio's own Task.cancel(): absorb
        # those until the outcome is in, so a committed write is never reported lost.
        while not reply.event.is_set():
            try:
                with anyio.CancelScope(shield=True):
                    await reply.event.wait()
            except anyio.get_cancelled_exc_class():
                pass
        rearm_cancellation()
    return reply.outcome()
