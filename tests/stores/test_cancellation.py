"""Cancellation never tears a write, never lies, and never breaks a connection.

The promise: a store call that returns has committed; a call that raises the
cancellation has changed nothing; the store works afterwards.
"""

from __future__ import annotations

import random
import sqlite3
from contextlib import contextmanager
from typing import TYPE_CHECKING

import anyio
from tether.stores import NewEntry, NewExecution, PostgresStore, SQLiteStore, Store

from tests._postgres import backends_waiting_on_locks, holding_lock

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    import pytest

BATCH = 5


def batch(tag: str) -> list[NewEntry]:
    return [NewEntry(path="agent:a", label=f"{tag}/{i}", payload={"i": i}) for i in range(BATCH)]


async def leased(store: Store, execution_id: str = "ex"):  # type: ignore[no-untyped-def]
    started = await store.start_execution(
        NewExecution(execution_id=execution_id, runner="r", root_path="agent:a"),
        owner="me", lease_seconds=600,
    )
    assert started.lease is not None
    return started.lease


async def labels(store: Store, execution_id: str = "ex") -> list[str]:
    return [e.label for e in await store.read_journal(execution_id)]


async def test_cancelled_before_it_starts_writes_nothing(store: Store) -> None:
    lease = await leased(store)
    with anyio.CancelScope() as scope:
        scope.cancel()
        await store.append(lease, batch("never"))
    assert scope.cancelled_caught
    assert await labels(store) == []
    assert await store.append(lease, batch("after")) == list(range(1, BATCH + 1))


async def test_cancelled_at_random_moments_is_all_or_nothing(store: Store) -> None:
    """Cancel writes at random points (queued, in flight, committing), many times."""
    lease = await leased(store)
    rng = random.Random(20261129)
    committed = 0
    for attempt in range(40):
        tag = f"w{attempt}"
        with anyio.move_on_after(rng.uniform(0, 0.003)) as scope:
            await store.append(lease, batch(tag))
        written = [label for label in await labels(store) if label.startswith(f"{tag}/")]
        assert written in ([], [f"{tag}/{i}" for i in range(BATCH)]), written
        # Returned normally <=> committed: the caller is told the truth.
        assert bool(written) == (not scope.cancelled_caught)
        committed += bool(written)
    journal = await store.read_journal("ex")
    assert [e.seq for e in journal] == list(range(1, committed * BATCH + 1))


@contextmanager
def sqlite_write_lock(store: SQLiteStore) -> Iterator[Callable[[], None]]:
    blocker = sqlite3.connect(store.path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        yield lambda: blocker.execute("COMMIT")
    finally:
        if blocker.in_transaction:
            blocker.execute("COMMIT")
        blocker.close()


async def test_blocked_write_cancelled_tells_the_truth(db_store: Store, request: pytest.FixtureRequest) -> None:
    """A write waiting for another session's lock, cancelled, then let go."""
    lease = await leased(db_store)
    outcome: dict[str, object] = {}

    async def writer(task_status: anyio.abc.TaskStatus[anyio.CancelScope]) -> None:
        with anyio.CancelScope() as scope:
            task_status.started(scope)
            outcome["seqs"] = await db_store.append(lease, batch("blocked"))
        outcome["cancelled"] = scope.cancelled_caught

    if isinstance(db_store, PostgresStore):
        dsn = request.getfixturevalue("postgres_dsn")
        assert db_store.schema is not None
        lock = holding_lock(dsn, db_store.schema, "SELECT 1 FROM tether_executions FOR UPDATE")
    else:
        assert isinstance(db_store, SQLiteStore)
        lock = sqlite_write_lock(db_store)  # type: ignore[assignment]
    with anyio.fail_after(30), lock as release:
        async with anyio.create_task_group() as tg:
            scope = await tg.start(writer)
            if isinstance(db_store, PostgresStore):
                # The statement is on the server, waiting for the row lock: in flight.
                while await anyio.to_thread.run_sync(backends_waiting_on_locks, dsn) == 0:
                    await anyio.sleep(0.01)
            else:
                await anyio.wait_all_tasks_blocked()
            scope.cancel()
            release.set() if hasattr(release, "set") else release()  # type: ignore[operator]
    written = [label for label in await labels(db_store) if label.startswith("blocked/")]
    assert written in ([], [f"blocked/{i}" for i in range(BATCH)])
    assert bool(written) == (not outcome["cancelled"]) == ("seqs" in outcome)
    if isinstance(db_store, PostgresStore):
        # A sent statement is never abandoned: it committed and said so.
        assert outcome == {"seqs": list(range(1, BATCH + 1)), "cancelled": False}
    assert len(await db_store.append(lease, batch("after"))) == BATCH


async def test_cancelled_read_in_flight_leaves_connection_usable(
    postgres_dsn: str, pg_schema: str
) -> None:
    """The statement is running on the server when the caller is cancelled."""
    async with PostgresStore(postgres_dsn, schema=pg_schema, max_size=1) as store:
        lease = await leased(store)
        await store.append(lease, batch("x"))
        with anyio.fail_after(30), holding_lock(
            postgres_dsn, pg_schema, "LOCK TABLE tether_journal IN ACCESS EXCLUSIVE MODE"
        ):
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(store.read_journal, "ex")
                    while await anyio.to_thread.run_sync(backends_waiting_on_locks, postgres_dsn) == 0:
                        await anyio.sleep(0.01)
                    scope.cancel()
            # Cancelled while the lock is still held: the read was abandoned promptly.
            assert scope.cancelled_caught
        # The pool's only connection was the one cancelled mid-statement.
        assert len(await store.read_journal("ex")) == BATCH
        assert await store.append(lease, batch("y")) == list(range(BATCH + 1, 2 * BATCH + 1))
