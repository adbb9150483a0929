"""`Store.watch`: woken by every write that grows an execution's journal, whoever made it."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from tether.stores import MemoryStore, NewInterrupt, PostgresStore, Store

from tests.conftest import make_store
from tests.stores.test_conformance import entry, started

WOKEN = 30  # seconds a wake may take at most before the test fails (it waits on the wake, not a clock)


async def test_a_write_by_the_same_store_wakes_its_watch(store: Store) -> None:
    lease = await started(store)
    async with store.watch(lease.execution_id) as watch:
        await store.append(lease, [entry("node:a")])
        with anyio.fail_after(WOKEN):
            await watch.wait()


async def test_every_journal_write_wakes_it_suspend_claim_and_release(store: Store) -> None:
    lease = await started(store)
    async with store.watch(lease.execution_id) as watch:
        await store.suspend(lease, [entry("suspended")], NewInterrupt(path="chain:refund/node:a", reason="ok?"))
        with anyio.fail_after(WOKEN):
            await watch.wait()
        await store.release_lease(lease, status="paused", entries=[entry("paused", path="chain:refund")])
        with anyio.fail_after(WOKEN):
            await watch.wait()
        await store.claim(lease.execution_id, {"approved": True})
        with anyio.fail_after(WOKEN):
            await watch.wait()


async def test_a_write_to_another_execution_does_not_wake_it_in_one_process() -> None:
    store = MemoryStore()  # notifications by execution id (Postgres too; SQLite's check is per file)
    mine, other = await started(store), await started(store)
    woken = anyio.Event()
    async with store.watch(mine.execution_id) as watch, anyio.create_task_group() as tg:
        async def waiter() -> None:
            await watch.wait()
            woken.set()

        tg.start_soon(waiter)
        await store.append(other, [entry("node:a")])
        await anyio.wait_all_tasks_blocked()
        assert not woken.is_set()
        await store.append(mine, [entry("node:b")])
        with anyio.fail_after(WOKEN):
            await woken.wait()


@pytest.mark.parametrize("kind", ["sqlite", "sqlite-normal", "postgres"])
async def test_a_write_through_another_connection_wakes_it(kind: str, tmp_path: Path,
                                                           request: pytest.FixtureRequest) -> None:
    # Another store object on the same database: what another process would be.
    async with make_store(kind, tmp_path, request) as here, make_store(kind, tmp_path, request) as there:
        lease = await started(there)
        async with here.watch(lease.execution_id) as watch:
            await there.append(lease, [entry("node:a")])
            with anyio.fail_after(WOKEN):
                await watch.wait()
            assert [e.label for e in await here.read_journal(lease.execution_id)] == ["node:a"]


async def test_watches_share_one_listener_and_close_it_with_the_last(tmp_path: Path,
                                                                   request: pytest.FixtureRequest) -> None:
    async with make_store("postgres", tmp_path, request) as store:
        assert isinstance(store, PostgresStore)
        lease = await started(store)
        async with store.watch(lease.execution_id), store.watch(lease.execution_id) as second:
            listener = store._journal_listener
            assert listener is not None and not listener.closed
            await store.append(lease, [entry("node:a")])
            with anyio.fail_after(WOKEN):
                await second.wait()
        assert store._journal_listener is None and listener.closed



async def test_postgres_notifies_only_while_someone_follows(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    # A NOTIFY serializes the commits that send one: a journal nobody follows sends none.
    async with make_store("postgres", tmp_path, request) as store:
        assert isinstance(store, PostgresStore)
        lease = await started(store)

        async def followers() -> int:
            rows = await store._fetch("SELECT count(*) AS n FROM tether_followers WHERE execution_id = $1",
                                      lease.execution_id)
            return int(rows[0]["n"])

        assert await followers() == 0
        async with store.watch(lease.execution_id), store.watch(lease.execution_id):
            assert await followers() == 2
        assert await followers() == 0
        async with store.watch(lease.execution_id, elsewhere=False):
            assert await followers() == 0  # it listens to this object alone
