"""The Postgres store's own small pool: waiters, cancelled waiters, and broken connections."""

from __future__ import annotations

import anyio
from tether.stores import NewEntry, NewExecution, PostgresStore

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
        with anyio.fail_after(30), holding_lock(
            postgres_dsn, pg_schema, "SELECT 1 FROM tether_executions FOR UPDATE"
        ) as release:
            async with anyio.create_task_group() as tg:
                for i in range(30, 60):
                    tg.start_soon(writer, i)
                while await anyio.to_thread.run_sync(backends_waiting_on_locks, postgres_dsn) < 2:
                    await anyio.sleep(0.01)
                tg.cancel_scope.cancel()
                release.set()
        # The two sent statements committed; the 28 queued callers wrote nothing.
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
        # The one pooled connection is dead; the first call reports it, the next reconnects.
        failures = 0
        for _ in range(2):
            try:
                assert await store.get_execution("missing") is None
            except Exception:
                failures += 1
        assert failures <= 1
        assert await store.count_pending() == 0
