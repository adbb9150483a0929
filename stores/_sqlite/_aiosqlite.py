"""The one place that relies on aiosqlite's internals (aiosqlite 0.22).

aiosqlite's public API crosses to the connection's thread once per statement,
and answers through an asyncio future: under trio that means a second thread
(the store's private asyncio loop) between the caller and the connection. The
store instead runs a whole transaction in one function on that thread, and the
thread wakes the waiting task on whichever loop it runs: one crossing each way,
on asyncio and on trio alike. Opening and closing go through the public API
(`aiosqlite.connect`, ``await``, `Connection.close`, `Connection.stop`).

The contract, which tests/stores/test_aiosqlite_contract.py checks bullet by
bullet, so that an aiosqlite release that breaks it fails there first:

- ``Connection._thread`` is the `threading.Thread` that serves the connection,
  started by ``await connection``: ``daemon`` can be set before that, and a
  failed connect stops it by itself (it can be joined).
- ``Connection._tx`` is that thread's queue. For ``_tx.put_nowait((future,
  function))`` the thread runs ``function()``, in order with the connection's
  own work, and keeps serving whatever it raises. Then, unless ``future`` is
  None, it calls ``future.get_loop().call_soon_threadsafe(callback, future,
  value)``, where ``callback(future, value)`` calls ``future.done()`` and then
  ``future.set_result(value)``, or ``future.set_exception(value)`` for what
  ``function()`` raised. `Reply` implements exactly those five methods; a real
  asyncio future works too (`call_on_driver_loop`).
- ``Connection._conn`` is the open `sqlite3.Connection`, which functions on the
  thread use.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import anyio
import anyio.lowlevel

from .._bridge import threadsafe_scheduler
from .._errors import StoreUnavailable

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Callable

    import aiosqlite

T = TypeVar("T")


async def connect(database: str, **kwargs: Any) -> aiosqlite.Connection:
    """Open an aiosqlite connection whose thread is a daemon; ``kwargs`` go to `sqlite3.connect`.

    Raises what `sqlite3.connect` raises, once aiosqlite's thread has stopped.
    """
    try:
        import aiosqlite
    except ImportError as exc:  # pragma: no cover - a dependency of tether
        raise StoreUnavailable("aiosqlite is missing: pip install tether") from exc
    conn = aiosqlite.connect(database, **kwargs)
    # aiosqlite's thread is not a daemon: a script that forgets to close the store
    # would hang at exit waiting for it. Committed data is safe either way.
    conn._thread.daemon = True
    try:
        await conn
    except BaseException:
        # A failed connect leaves aiosqlite stopping its thread, which then calls back
        # into this loop; wait for it, so that it never finds the loop closed.
        await asyncio.get_running_loop().run_in_executor(None, conn._thread.join, 10)
        raise
    return conn


def connection_of(conn: aiosqlite.Connection) -> sqlite3.Connection:
    """The `sqlite3.Connection` under ``conn``; use it only on ``conn``'s thread."""
    return conn._conn


def submit(conn: aiosqlite.Connection, fn: Callable[[sqlite3.Connection], T], reply: Reply[T]) -> None:
    """Queue ``fn(connection)`` on ``conn``'s thread; ``reply`` gets its outcome and wakes its task."""
    conn._tx.put_nowait((reply, partial(fn, conn._conn)))  # type: ignore[arg-type]  # quacks like a future


def post(conn: aiosqlite.Connection, job: Callable[[], object]) -> None:
    """Queue ``job()`` on ``conn``'s thread with no reply: it tells whoever waits itself.

    (With a reply, the thread would wake the loop once more, for nothing.)
    """
    conn._tx.put_nowait((None, job))


async def call_on_driver_loop(conn: aiosqlite.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """`call`, from the store's own asyncio loop (opening the store), with an asyncio future.

    That loop may run in a thread of a trio program, where anyio would take it
    for trio (the context it was started from says so): so nothing of anyio here.
    """
    future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    conn._tx.put_nowait((future, partial(fn, conn._conn)))
    return await future


async def call(conn: aiosqlite.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """Run ``fn(connection)`` on ``conn``'s thread and return its result, from any task.

    One crossing each way, on asyncio and trio alike. A cancelled caller just
    leaves: ``fn`` runs to its end on the thread, and its result is dropped.
    """
    await anyio.lowlevel.checkpoint_if_cancelled()
    reply: Reply[T] = Reply()
    submit(conn, fn, reply)
    await reply.event.wait()
    return reply.outcome()


class Reply(Generic[T]):
    """One outcome, set on any thread, that wakes one task on its own loop (asyncio or trio).

    Its first four methods are what aiosqlite's thread calls on a future.
    """

    __slots__ = ("_done", "_error", "_result", "event", "schedule")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.schedule = threadsafe_scheduler()  # the waiting task's loop
        self._done = False
        self._result: Any = None
        self._error: BaseException | None = None

    # -- what aiosqlite's thread calls -------------------------------------------

    def get_loop(self) -> Reply[T]:
        return self

    def call_soon_threadsafe(self, callback: Callable[[Reply[T], Any], None], _: Any, value: Any) -> None:
        callback(self, value)  # aiosqlite's set_result or set_exception, run right here
        self.wake()

    def done(self) -> bool:
        return self._done

    def set_result(self, result: T) -> None:
        self._result, self._done = result, True

    def set_exception(self, error: BaseException) -> None:
        self._error, self._done = error, True

    # -- tether's side -------------------------------------------------------------

    def settle(self, ok: bool, value: Any) -> None:
        """Set the outcome without waking the task (a batch wakes its writers together)."""
        if ok:
            self.set_result(value)
        else:
            self.set_exception(value)

    def wake(self) -> None:
        """Wake the waiting task, from any thread."""
        try:
            self.schedule(self.event.set)
        except Exception:  # noqa: BLE001, S110 - the waiting loop is gone; nobody is left to wake
            pass

    def outcome(self) -> T:
        """The result, or the error raised; call it once ``event`` is set."""
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[no-any-return]
