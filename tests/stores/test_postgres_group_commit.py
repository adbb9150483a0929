"""Postgres group commit: appends that arrive while one is written share the next statement."""

from __future__ import annotations

import anyio
import anyio.abc
from tether.stores import Lease, NewEntry, NewExecution, PostgresStore, StaleLease

from tests._postgres import backends_waiting_on_locks, holding_lock


async def leases(store: PostgresStore, count: int) -> list[Lease]:
    out = []
    for i in range(count):
        started = await store.start_execution(
            NewExecution(execution_id=f"ex-{i}", runner="r", root_path="a"), owner="me", lease_seconds=60)
        assert started.lease is not None
        out.append(started.lease)
    return out


async def stuck_first_append(store: PostgresStore, dsn: str, schema: str, lease: Lease,
                             tg: anyio.abc.TaskGroup) -> None:
    """Start an append of ``lease`` that waits on the server (its row is locked), and wait until it does."""
    tg.start_soon(store.append, lease, [NewEntry(path="a", label="first")])
    while await anyio.to_thread.run_sync(backends_waiting_on_locks, dsn) < 1:
        await anyio.sleep(0.01)


async def test_appends_queued_behind_one_statement_share_the_next(postgres_dsn: str, pg_schema: str) -> None:
    async with PostgresStore(postgres_dsn, schema=pg_schema) as store:
        first, *others = await leases(store, 21)
        seqs: dict[str, list[int]] = {}

        async def append(lease: Lease, i: int) -> None:
            # Two appends per execution at once, as parallel branches write: consecutive seqs.
            seqs.setdefault(lease.execution_id, []).extend(
                await store.append(lease, [NewEntry(path="a", label=f"w{i}"), NewEntry(path="a", label="x")]))

        batches = store._appends.batches
        with anyio.fail_after(30), holding_lock(
            postgres_dsn, pg_schema, "SELECT 1 FROM tether_executions WHERE id = 'ex-0' FOR UPDATE"
        ) as release:
            async with anyio.create_task_group() as tg:
                await stuck_first_append(store, postgres_dsn, pg_schema, first, tg)
                for i, lease in enumerate(others * 2):
                    tg.start_soon(append, lease, i)
                await wait_queued(store, 40)
                release.set()
        assert store._appends.batches == batches + 1  # the 40 queued appends went in one statement
        for lease in others:
            assert sorted(seqs[lease.execution_id]) == [1, 2, 3, 4]
            labels = [e.label for e in await store.read_journal(lease.execution_id)]
            assert len(labels) == 4 and labels.count("x") == 2
        assert [e.label for e in await store.read_journal("ex-0")] == ["first"]


async def test_a_stale_lease_in_a_batch_fails_alone(postgres_dsn: str, pg_schema: str) -> None:
    async with PostgresStore(postgres_dsn, schema=pg_schema) as store:
        first, good, stale = await leases(store, 3)
        await store.release_lease(stale)
        taken = await store.acquire_lease(stale.execution_id, owner="other", lease_seconds=60)
        outcomes: dict[str, object] = {}

        async def append(lease: Lease) -> None:
            try:
                outcomes[lease.owner + lease.execution_id] = await store.append(lease, [NewEntry(path="a", label="w")])
            except StaleLease as exc:
                outcomes[lease.owner + lease.execution_id] = exc

        batches = store._appends.batches
        with anyio.fail_after(30), holding_lock(
            postgres_dsn, pg_schema, "SELECT 1 FROM tether_executions WHERE id = 'ex-0' FOR UPDATE"
        ) as release:
            async with anyio.create_task_group() as tg:
                await stuck_first_append(store, postgres_dsn, pg_schema, first, tg)
                for lease in (good, stale, taken):
                    tg.start_soon(append, lease)
                await wait_queued(store, 3)
                release.set()
        assert store._appends.batches == batches + 1
        assert outcomes["me" + good.execution_id] == [1]
        assert isinstance(outcomes["me" + stale.execution_id], StaleLease)
        assert outcomes["other" + stale.execution_id] == [1]  # the lease's holder wrote, the stale one did not
        assert [e.label for e in await store.read_journal(stale.execution_id)] == ["w"]


async def test_a_queued_append_cancelled_writes_nothing(postgres_dsn: str, pg_schema: str) -> None:
    async with PostgresStore(postgres_dsn, schema=pg_schema) as store:
        first, second, third = await leases(store, 3)
        with anyio.fail_after(30), holding_lock(
            postgres_dsn, pg_schema, "SELECT 1 FROM tether_executions WHERE id = 'ex-0' FOR UPDATE"
        ) as release:
            async with anyio.create_task_group() as outer:
                await stuck_first_append(store, postgres_dsn, pg_schema, first, outer)
                async with anyio.create_task_group() as doomed:
                    doomed.start_soon(store.append, second, [NewEntry(path="a", label="never")])
                    await wait_queued(store, 1)
                    doomed.cancel_scope.cancel()
                outer.start_soon(store.append, third, [NewEntry(path="a", label="later")])
                await wait_queued(store, 1)
                release.set()
        assert [e.label for e in await store.read_journal(second.execution_id)] == []
        assert [e.label for e in await store.read_journal(third.execution_id)] == ["later"]
        # The queue goes on working: an append alone is written at once.
        assert await store.append(second, [NewEntry(path="a", label="now")]) == [1]


async def wait_queued(store: PostgresStore, count: int) -> None:
    """Until ``count`` appends wait in the store's queue (they queue on the driver's loop)."""
    while len(store._appends._queue) < count:
        await anyio.sleep(0.001)

