"""What the SQLite store relies on in aiosqlite's internals: the contract of stores/_sqlite/_aiosqlite.py.

Each test checks one bullet of that module's docstring against aiosqlite itself,
so that a release which changes one fails here, by name, before any store test.
"""

from __future__ import annotations

import sqlite3
import threading
from typing import TYPE_CHECKING, Any

import aiosqlite
import anyio
import anyio.to_thread
import pytest
from tether.stores._bridge import open_driver_loop
from tether.stores._sqlite import _aiosqlite

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from pathlib import Path

asyncio_only = pytest.mark.parametrize("anyio_backend", ["asyncio"])  # aiosqlite itself runs on asyncio


class RecordingFuture:
    """Stands where `Reply` does, and writes down every call aiosqlite's thread makes."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.answered = threading.Event()

    def get_loop(self) -> RecordingFuture:
        self.calls.append(("get_loop", threading.current_thread()))
        return self

    def call_soon_threadsafe(self, callback: Callable[[Any, Any], None], future: Any, value: Any) -> None:
        self.calls.append(("call_soon_threadsafe", future is self))
        callback(future, value)
        self.answered.set()

    def done(self) -> bool:
        self.calls.append(("done",))
        return False

    def set_result(self, value: Any) -> None:
        self.calls.append(("set_result", value))

    def set_exception(self, error: BaseException) -> None:
        self.calls.append(("set_exception", error))


async def answered(future: RecordingFuture) -> None:
    assert await anyio.to_thread.run_sync(future.answered.wait, 10), "aiosqlite's thread never answered"


@pytest.fixture
async def conn(tmp_path: Path) -> AsyncIterator[aiosqlite.Connection]:
    async with aiosqlite.connect(tmp_path / "contract.db", isolation_level=None) as opened:
        yield opened


@asyncio_only
async def test_thread_is_a_thread_started_by_await_and_may_be_a_daemon(tmp_path: Path) -> None:
    conn = aiosqlite.connect(tmp_path / "contract.db")
    assert isinstance(conn._thread, threading.Thread)
    assert not conn._thread.is_alive()
    conn._thread.daemon = True  # allowed only before the thread starts
    await conn
    try:
        assert conn._thread.is_alive() and conn._thread.daemon
    finally:
        await conn.close()
    conn._thread.join(10)
    assert not conn._thread.is_alive()


@asyncio_only
async def test_a_failed_connect_stops_the_thread_by_itself(tmp_path: Path) -> None:
    conn = aiosqlite.connect((tmp_path / "missing.db").as_uri() + "?mode=rw", uri=True)
    conn._thread.daemon = True
    with pytest.raises(sqlite3.OperationalError):
        await conn
    await anyio.to_thread.run_sync(conn._thread.join, 10)
    assert not conn._thread.is_alive()


@asyncio_only
async def test_conn_is_the_open_sqlite3_connection(conn: aiosqlite.Connection) -> None:
    assert isinstance(conn._conn, sqlite3.Connection)

    def on_the_thread(db: sqlite3.Connection) -> tuple[bool, Any]:
        return db is conn._conn, db.execute("SELECT 41 + 1").fetchone()

    assert await _aiosqlite.call_on_driver_loop(conn, on_the_thread) == (True, (42,))


@asyncio_only
async def test_tx_runs_a_function_on_the_thread_and_answers_through_the_future(
    conn: aiosqlite.Connection,
) -> None:
    future = RecordingFuture()
    ran_on: list[threading.Thread] = []

    def function() -> int:
        ran_on.append(threading.current_thread())
        return 42

    conn._tx.put_nowait((future, function))  # type: ignore[arg-type]
    await answered(future)
    assert ran_on == [conn._thread]
    assert future.calls == [("get_loop", conn._thread), ("call_soon_threadsafe", True), ("done",),
                            ("set_result", 42)]


@asyncio_only
async def test_tx_answers_an_exception_with_set_exception_and_keeps_serving(conn: aiosqlite.Connection) -> None:
    error = ValueError("refused")

    def failing() -> None:
        raise error

    failed, after = RecordingFuture(), RecordingFuture()
    conn._tx.put_nowait((failed, failing))  # type: ignore[arg-type]
    conn._tx.put_nowait((after, lambda: "still serving"))  # type: ignore[arg-type]
    await answered(failed)
    await answered(after)
    assert failed.calls[-2:] == [("done",), ("set_exception", error)]
    assert after.calls[-1] == ("set_result", "still serving")


@asyncio_only
async def test_tx_without_a_future_runs_the_function_and_answers_nothing(conn: aiosqlite.Connection) -> None:
    ran = threading.Event()
    conn._tx.put_nowait((None, ran.set))
    assert await anyio.to_thread.run_sync(ran.wait, 10)
    assert [tuple(row) for row in await conn.execute_fetchall("SELECT 1")] == [(1,)]  # the thread goes on


@asyncio_only
async def test_tx_runs_in_order_with_the_connections_own_work(conn: aiosqlite.Connection) -> None:
    await conn.execute("CREATE TABLE t (x INTEGER)")
    conn._tx.put_nowait((None, lambda: conn._conn.execute("INSERT INTO t VALUES (1)")))
    await conn.execute("INSERT INTO t VALUES (2)")  # queued after it: runs after it
    seen = await _aiosqlite.call_on_driver_loop(conn, lambda db: db.execute("SELECT x FROM t").fetchall())
    assert seen == [(1,), (2,)]


async def test_reply_wakes_the_waiting_task_on_either_backend(tmp_path: Path) -> None:
    """The store's path: aiosqlite opened on its driver loop, the caller on either backend."""
    loop = open_driver_loop()
    conn = await loop.run(lambda op: _aiosqlite.connect(str(tmp_path / "contract.db"), check_same_thread=False))
    try:
        assert conn._thread.daemon
        assert await _aiosqlite.call(conn, lambda db: db.execute("SELECT 42").fetchone()) == (42,)
        with pytest.raises(sqlite3.OperationalError, match="no such table"):
            await _aiosqlite.call(conn, lambda db: db.execute("SELECT * FROM nowhere"))
    finally:
        await loop.run(lambda op: conn.close())
        await loop.aclose()
