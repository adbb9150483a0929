"""The Postgres store's own small pool: waiters, cancelled waiters, and broken connections."""

from __future__ import annotations

import anyio
import pytest
from tether.stores import NewEntry, NewExecution, PostgresStore, StoreUnavailable
from tether.stores._postgres.pool import ConnectionPool

from tests._postgres import admin_sql, backends_waiting_on_locks, holding_lock


async def test_more_callers_than_connections(postgres_dsn: str, pg_schema: str) -> None:
    async with PostgresStore(postgres_dsn, schema=pg_schema, max_size=2) as store:
        started = await store.start_execution(
            NewExecution(execution_id="ex", runner="r", root_path="a"), owner="me", lease_seconds=60
        )
        lease = started.lease
        assert lease is not None

        async def writer(i: int) -> None:
            await store.append(lease, [NewEntry(path="a", label=f"w{i}")])

        async with anyio.create_task_group() as tg:
            for i in range(30):
                tg.start_soon(writer, i)
        assert len(await store.read_journal("ex")) == 30

        # 30 more callers: two are stuck on the server behind a row lock holding both
        # connections, 28 wait in the pool's queue. Cancel all of them.
        returned: list[int] = []
        ended = 0
        queued_gone = anyio.Event()

        async def tracked(i: int) -> None:
            nonlocal ended
            try:
                # Not an append: appends share a statement (group commit), and here each
                # caller needs a connection of its own.
                await store.deliver_message("ex", "a", {"n": i}, by="test")
                returned.append(i)
            finally:
                ended += 1
                if ended == 28:
                    queued_gone.set()

        with anyio.fail_after(30), holding_lock(
            postgres_dsn, pg_schema, "SELECT 1 FROM tether_executions FOR UPDATE"
        ) as release:
            async with anyio.create_task_group() as tg:
                for i in range(30, 60):
                    tg.start_soon(tracked, i)
                while await anyio.to_thread.run_sync(backends_waiting_on_locks, postgres_dsn) < 2:
                    await anyio.sleep(0.01)
                tg.cancel_scope.cancel()
                with anyio.CancelScope(shield=True):
                    await queued_gone.wait()  # the queued callers gave up without writing
                release.set()
        # The two statements already sent committed, and said so; nothing else was written.
        assert len(returned) == 2
        seqs = [e.seq for e in await store.read_journal("ex")]
        assert seqs == list(range(1, 33))
        # The pool still hands out connections after its waiters were cancelled.
        assert len(await store.append(lease, [NewEntry(path="a", label="last")])) == 1


async def test_a_killed_connection_is_replaced(postgres_dsn: str, pg_schema: str) -> None:
    async with PostgresStore(postgres_dsn, schema=pg_schema, max_size=1) as store:
        assert await store.get_execution("missing") is None
        await anyio.to_thread.run_sync(
            admin_sql, postgres_dsn,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        # The one pooled connection is dead. At most one call reports it, as
        # StoreUnavailable (never a raw driver error), and the next one reconnects.
        failures = 0
        for _ in range(2):
            try:
                assert await store.get_execution("missing") is None
            except StoreUnavailable:
                failures += 1
        assert failures <= 1
        assert await store.count_pending() == 0


class FakeConnection:
    """Just enough of a connection for the pool's bookkeeping."""

    def __init__(self) -> None:
        self.closed = False

    def is_closed(self) -> bool:
        return self.closed

    def is_in_transaction(self) -> bool:
        return False

    def terminate(self) -> None:
        self.closed = True

    async def close(self, timeout: float | None = None) -> None:
        self.closed = True


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the pool lives on the driver's asyncio loop
async def test_a_failed_connect_hands_its_slot_to_a_waiter() -> None:
    attempts: list[str] = []
    first_may_fail = anyio.Event()

    async def connect() -> FakeConnection:
        attempts.append("connect")
        if len(attempts) == 2:
            await first_may_fail.wait()
            raise OSError("connection refused")
        return FakeConnection()

    pool = ConnectionPool(connect, max_size=2)
    async with pool.connection():
        got: list[object] = []

        async def second() -> None:
            with pytest.raises(OSError, match="refused"):
                async with pool.connection():
                    pass

        async def third() -> None:
            async with pool.connection() as conn:
                got.append(conn)

        async with anyio.create_task_group() as tg:
            tg.start_soon(second)              # takes the last slot, connects slowly
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(third)               # queues for a connection
            await anyio.wait_all_tasks_blocked()
            first_may_fail.set()               # the slow connect fails: the waiter inherits the slot
    assert len(got) == 1 and attempts == ["connect", "connect", "connect"]
    await pool.aclose()


async def test_drop_schema_removes_everything_the_store_kept(postgres_dsn: str, pg_schema: str) -> None:
    from tether.stores import ConfigurationError

    async with PostgresStore(postgres_dsn, schema=pg_schema) as store:
        await store.start_execution(NewExecution(execution_id="x", runner="r", root_path="chain:r"),
                                    owner="o", lease_seconds=5)
        await store.drop_schema()
    rows = admin_sql(postgres_dsn, "SELECT 1 FROM information_schema.schemata WHERE schema_name = $1", pg_schema)
    assert rows == []
    with pytest.raises(ConfigurationError, match="no schema of its own"):
        await PostgresStore(postgres_dsn).drop_schema()
