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

import contextlib
import sqlite3
import threading
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import anyio
import anyio.lowlevel

from ._bridge import _threadsafe_waker, rearm_cancellation

if TYPE_CHECKING:
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


async def read_on_worker(conn: aiosqlite.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """Run the read ``fn(connection)`` on the connection's thread and return its result.

    A cancelled caller just leaves; the read finishes on its thread and its result
    is dropped. (Writes go through `GroupCommit`, whose callers wait for the outcome.)
    """
    await anyio.lowlevel.checkpoint_if_cancelled()
    reply: _Reply[T] = _Reply()
    conn._tx.put_nowait((reply, partial(fn, conn._conn)))  # type: ignore[arg-type]
    await reply.event.wait()
    return reply.outcome()


class GroupCommit:
    """Write transactions that arrive together share one ``BEGIN IMMEDIATE`` .. ``COMMIT``.

    Writes are queued here; one job on the connection's thread takes every write
    queued so far and runs them in one transaction, each inside a savepoint of
    its own, so one write's failure (a fenced lease, say) rolls back only that
    write. Every caller learns its outcome after the COMMIT: a write is never
    acknowledged before it is durable. While a transaction commits (the fsync),
    new writes queue up for the next one: under load, one fsync serves many
    boundaries; alone, a write costs what it did.
    """

    def __init__(self, conn: aiosqlite.Connection, now: Callable[[], int]) -> None:
        self._conn = conn
        self._now = now
        self._queued: list[tuple[Callable[[sqlite3.Connection, int], Any], _Reply[Any]]] = []
        self._lock = threading.Lock()
        self._job_queued = False

    async def write(self, fn: Callable[[sqlite3.Connection, int], T]) -> T:
        """Run ``fn(db, now)`` in a shared transaction; return once that transaction committed."""
        await anyio.lowlevel.checkpoint_if_cancelled()
        reply: _Reply[T] = _Reply()
        with self._lock:
            self._queued.append((fn, reply))
            start_job = not self._job_queued
            self._job_queued = True
        if start_job:
            self._conn._tx.put_nowait((_Reply(), partial(self._run_batches, self._conn._conn)))  # type: ignore[arg-type]
        return await _wait_committed(reply)

    def _run_batches(self, db: sqlite3.Connection) -> None:
        """On the connection's thread: commit batches until none is queued."""
        while True:
            with self._lock:
                batch, self._queued = self._queued, []
                if not batch:
                    self._job_queued = False
                    return
            try:
                self._commit(db, batch)
            except BaseException as exc:  # noqa: BLE001 - nothing may leave a caller waiting forever
                for _, reply in batch:
                    if not reply.done():
                        reply.call_soon_threadsafe(_deliver, reply, (False, exc))

    def _commit(self, db: sqlite3.Connection,
                batch: list[tuple[Callable[[sqlite3.Connection, int], Any], _Reply[Any]]]) -> None:
        outcomes: list[tuple[bool, Any]] = []
        try:
            db.execute("BEGIN IMMEDIATE")
            alone = len(batch) == 1
            for fn, _ in batch:
                if not alone:
                    db.execute("SAVEPOINT tether_write")
                try:
                    outcomes.append((True, fn(db, self._now())))
                except Exception as exc:  # this write's own failure: undo it, keep the others
                    if alone:
                        raise
                    db.execute("ROLLBACK TO tether_write")
                    outcomes.append((False, exc))
                if not alone:
                    db.execute("RELEASE tether_write")
            db.execute("COMMIT")
        except BaseException as exc:  # noqa: BLE001 - whatever it was, every caller must hear it
            if db.in_transaction:
                with contextlib.suppress(sqlite3.Error):  # the connection's own state says the rest
                    db.execute("ROLLBACK")
            outcomes = [(False, exc)] * len(batch)
        for (_, reply), (ok, value) in zip(batch, outcomes, strict=True):
            reply.call_soon_threadsafe(_deliver, reply, (ok, value))


def _deliver(reply: _Reply[Any], outcome: tuple[bool, Any]) -> None:
    ok, value = outcome
    if ok:
        reply.set_result(value)
    else:
        reply.set_exception(value)


async def _wait_committed(reply: _Reply[T]) -> T:
    """Wait for a queued write's outcome; a cancelled caller still waits for it (it will commit or not).

    A shield stops anyio's cancellation, not asyncio's own Task.cancel(): those are
    absorbed until the outcome is in, so a committed write is never reported lost,
    and the cancellation is delivered afterwards.
    """
    try:
        await reply.event.wait()
    except anyio.get_cancelled_exc_class():
        while not reply.event.is_set():
            try:
                with anyio.CancelScope(shield=True):
                    await reply.event.wait()
            except anyio.get_cancelled_exc_class():
                pass
        rearm_cancellation()
    return reply.outcome()
