"""Closing a store while it opens or works, and asyncio's own repeated cancellation."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest
from tether.stores import NewEntry, NewExecution, SQLiteStore, Store, UsageError

from tests.conftest import make_store


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_close_while_opening_leaves_it_closed(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store = make_store(kind, tmp_path, request)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_open_unless_closed, store)
        await anyio.lowlevel.checkpoint()  # the open has begun
        await store.aclose()
    with pytest.raises(UsageError):
        await store.list_pending()


async def _open_unless_closed(store: Store) -> None:
    try:
        await store.setup()
    except UsageError:
        pass  # closed before it could open: fine


async def test_close_waits_for_a_write_in_flight(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "a.db")
    started = await store.start_execution(NewExecution(execution_id="ex", runner="r", root_path="a"),
                                          owner="me", lease_seconds=60)
    assert started.lease is not None
    blocker = sqlite3.connect(tmp_path / "a.db", isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    written: list[int] = []

    async def write() -> None:
        written.extend(await store.append(started.lease, [NewEntry(path="a", label="late")]))  # type: ignore[arg-type]

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(write)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(store.aclose)
            await anyio.wait_all_tasks_blocked()
            blocker.execute("COMMIT")
    blocker.close()
    # The write finished and its caller learned it before the store closed.
    assert written == [1]
    async with SQLiteStore(tmp_path / "a.db") as again:
        assert [e.label for e in await again.read_journal("ex")] == ["late"]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # asyncio's own Task.cancel(), twice
async def test_repeated_native_cancellation_never_abandons_a_write(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "a.db") as store:
        started = await store.start_execution(NewExecution(execution_id="ex", runner="r", root_path="a"),
                                              owner="me", lease_seconds=60)
        lease = started.lease
        assert lease is not None
        blocker = sqlite3.connect(tmp_path / "a.db", isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        task = asyncio.ensure_future(store.append(lease, [NewEntry(path="a", label="w")]))
        await anyio.wait_all_tasks_blocked()
        task.cancel()
        await anyio.wait_all_tasks_blocked()
        task.cancel()
        await anyio.wait_all_tasks_blocked()
        assert not task.done()  # still waiting for the write's outcome, not abandoned
        blocker.execute("COMMIT")
        blocker.close()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The write had finished first; the task still ends cancelled, as asked.
        assert [e.label for e in await store.read_journal("ex")] == ["w"]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # asyncio's own Task.cancel(), once
async def test_a_native_cancellation_absorbed_for_a_commit_is_delivered_after_it(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "a.db") as store:
        started = await store.start_execution(NewExecution(execution_id="ex", runner="r", root_path="a"),
                                              owner="me", lease_seconds=60)
        lease = started.lease
        assert lease is not None
        blocker = sqlite3.connect(tmp_path / "a.db", isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        returned: list[list[int]] = []

        async def append_then_more() -> None:
            returned.append(await store.append(lease, [NewEntry(path="a", label="w")]))
            await anyio.sleep_forever()  # the cancellation must land here, not be lost

        task = asyncio.ensure_future(append_then_more())
        await anyio.wait_all_tasks_blocked()
        task.cancel()
        await anyio.wait_all_tasks_blocked()
        blocker.execute("COMMIT")
        blocker.close()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert returned == [[1]]  # the append reported its commit...
        assert [e.label for e in await store.read_journal("ex")] == ["w"]  # ... which is there
