"""A cancelled Postgres store call leaves no future whose exception nobody retrieves.

asyncpg's connect, cancelled just as its socket connects, leaves the future
that was to hold the answer to its SSLRequest with ``ConnectionError('unexpected
connection_lost() call')`` and nobody awaiting it; asyncio logs "Future exception
was never retrieved" when that future is collected. The pool (and the LISTEN
connection) therefore never cancel a connect: see stores/_postgres/pool.py.
"""

from __future__ import annotations

import contextlib
import gc
import logging
from contextlib import contextmanager
from typing import TYPE_CHECKING

import anyio
import anyio.abc
import anyio.lowlevel
import pytest
from tether.stores import NewEntry, NewExecution, PostgresStore, StoreError, StoreUnavailable
from tether.stores._postgres.pool import ConnectionPool

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tether.stores import Lease

# What asyncio logs for a future or task that was dropped with its outcome unread.
LEAKS = ("exception was never retrieved", "Task was destroyed but it is pending")


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextmanager
def asyncio_leaks() -> Iterator[list[str]]:
    """Collect what asyncio logs about abandoned futures and tasks, from any thread.

    Read the list after the block: it ends with a full collection, which is when
    a dropped future logs.
    """
    handler = _Records()
    logger = logging.getLogger("asyncio")
    logger.addHandler(handler)
    leaks: list[str] = []
    try:
        yield leaks
    finally:
        gc.collect()
        logger.removeHandler(handler)
        leaks.extend(m for m in handler.messages if any(leak in m for leak in LEAKS))


async def test_calls_cancelled_at_varied_moments_leave_no_unretrieved_future(
    postgres_dsn: str, pg_schema: str
) -> None:
    """A few hundred reads, appends, claims and listens, cancelled at varied moments.

    Half are cancelled by a deadline, half by their task group after a number of
    checkpoints. Appends still keep the promise: returned <=> committed.
    """
    concurrency, rounds = 8, 40
    returned: set[str] = set()

    async def call(store: PostgresStore, lease: Lease, n: int) -> None:
        kind = n % 5
        if kind == 0:
            await store.read_journal(lease.execution_id, limit=5)
        elif kind == 1:
            await store.append(lease, [NewEntry(path="agent:a", label=f"w{n}")])
            returned.add(f"w{n}")
        elif kind == 2:
            with contextlib.suppress(StoreError):  # there is nothing to resume
                await store.claim(lease.execution_id, "value", path="agent:a")
        elif kind == 3:
            await store.get_execution(lease.execution_id)
        else:
            listener = await store.listen(lambda: None)
            await listener.aclose()

    async def cancelled_call(store: PostgresStore, lease: Lease, n: int) -> None:
        if n % 2:
            with anyio.move_on_after((n // 2 % 16) * 0.00025):  # 0 to 3.75 ms
                await call(store, lease, n)
        else:
            async with anyio.create_task_group() as tg:
                tg.start_soon(call, store, lease, n)
                for _ in range(n // 2 % 12):
                    await anyio.lowlevel.checkpoint()
                tg.cancel_scope.cancel()

    with asyncio_leaks() as leaks, anyio.fail_after(60):
        # A fresh store every few rounds, so that opening and growing pools are cancelled too.
        n = 0
        for first in range(0, rounds, 10):
            async with PostgresStore(postgres_dsn, schema=pg_schema, max_size=concurrency) as store:
                started = await store.start_execution(
                    NewExecution(execution_id=f"ex{first}", runner="r", root_path="agent:a"),
                    owner="me", lease_seconds=600,
                )
                lease = started.lease
                assert lease is not None
                for _ in range(first, first + 10):
                    async with anyio.create_task_group() as tg:
                        for _ in range(concurrency):
                            tg.start_soon(cancelled_call, store, lease, n)
                            n += 1
        async with PostgresStore(postgres_dsn, schema=pg_schema) as store:
            written = {e.label for first in range(0, rounds, 10) for e in await store.read_journal(f"ex{first}")}
    assert leaks == []
    assert written == returned


class SilentServer:
    """Accepts connections, reads asyncpg's SSLRequest, and answers nothing until told to hang up."""

    def __init__(self) -> None:
        self.asked = anyio.Event()
        self.hang_up = anyio.Event()

    async def handle(self, stream: anyio.abc.SocketStream) -> None:
        asked, hang_up = self.asked, self.hang_up
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.EndOfStream,
                                 anyio.ClosedResourceError):
            async with stream:
                if hang_up.is_set():
                    return
                await stream.receive(8)
                asked.set()
                await hang_up.wait()


async def test_a_connect_left_by_a_cancelled_call_fails_without_an_unretrieved_exception() -> None:
    """Cancel each call while its connect waits for the answer to its SSLRequest, then hang up.

    The connect, which the pool does not cancel, then fails with nobody waiting
    for it: its error must still be read, and the call must end.
    """
    server = SilentServer()

    async def first_call(store: PostgresStore) -> None:
        # Under trio the cancellation crosses to the driver's thread and may land
        # after the hang-up: then the call fails instead, having changed nothing too.
        with contextlib.suppress(StoreUnavailable):
            await store.get_execution("ex")

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    with asyncio_leaks() as leaks, anyio.fail_after(30):
        async with listener, anyio.create_task_group() as serving:
            serving.start_soon(listener.serve, server.handle)
            for _ in range(20):
                server.asked, server.hang_up = anyio.Event(), anyio.Event()
                store = PostgresStore(f"postgresql://postgres@127.0.0.1:{port}/postgres", connect_timeout=20)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(first_call, store)
                    await server.asked.wait()
                    tg.cancel_scope.cancel()
                    # The connect now fails on its own: the call ends, having changed nothing.
                    server.hang_up.set()
                await store.aclose()
            serving.cancel_scope.cancel()
    assert leaks == []


class FakeConnection:
    """Just enough of a connection for the pool's bookkeeping, recording its statements."""

    def __init__(self) -> None:
        self.closed = False
        self.statements: list[str] = []

    def is_closed(self) -> bool:
        return self.closed

    def is_in_transaction(self) -> bool:
        return False

    def terminate(self) -> None:
        self.closed = True

    async def close(self, timeout: float | None = None) -> None:
        self.closed = True

    async def execute(self, sql: str, timeout: float | None = None) -> str:
        self.statements.append(sql)
        return "SELECT 1"


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the pool lives on the driver's asyncio loop
async def test_a_connect_outlives_its_cancelled_caller_and_serves_the_next() -> None:
    """The pool never cancels a connect: a cancelled caller leaves, the connection goes to the next."""
    attempts: list[FakeConnection] = []
    may_connect = anyio.Event()

    async def connect() -> FakeConnection:
        attempts.append(FakeConnection())
        await may_connect.wait()
        return attempts[-1]

    pool = ConnectionPool(connect, max_size=1)
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(pool.fill, 1)
            await anyio.wait_all_tasks_blocked()  # the connect is under way
            scope.cancel()
    assert scope.cancelled_caught and len(attempts) == 1
    may_connect.set()
    async with pool.connection() as conn:  # waits for the left-behind connect, opens no other
        assert attempts == [conn]
    await pool.aclose()
    assert conn.closed


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_connection_whose_statement_was_cancelled_is_settled_before_reuse() -> None:
    """One more statement ends whatever the cancelled one left on the server, before anyone reuses it."""
    opened: list[FakeConnection] = []

    async def connect() -> FakeConnection:
        opened.append(FakeConnection())
        return opened[-1]

    pool = ConnectionPool(connect, max_size=1)
    with anyio.CancelScope() as scope:
        async with pool.connection():
            scope.cancel()
            await anyio.lowlevel.checkpoint()  # the statement, interrupted
    assert scope.cancelled_caught
    async with pool.connection() as conn:
        assert conn.statements == ["SELECT 1"]
    assert opened == [conn]
    await pool.aclose()
