"""Store work that may wait never runs on the event loop's thread, however many actors write.

At ``synchronous=FULL`` every statement runs on the store's connection thread. At
``NORMAL`` a write that finds the connection idle commits on the loop's thread (no
fsync, cheaper than two thread wake-ups), but nothing there waits: not for another
process's lock, and not for a WAL checkpoint's fsync.
"""

from __future__ import annotations

import math
import sqlite3
import threading
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from pydantic import BaseModel
from tether.runtime import Actor, ActorRef, Runtime
from tether.stores import NewEntry, NewExecution, SQLiteStore
from tether.stores._sqlite.writes import WritePolicy


class Ping(BaseModel):
    hops: int


class Hops(BaseModel):
    seen: int = 0


class Relay(Actor[Hops]):
    kind = "relay"
    messages = (Ping,)
    peers: list[ActorRef] = []  # noqa: RUF012  (filled by the test)

    async def receive(self, message: Any) -> Any:
        self.state.seen += 1
        if message.hops > 0:
            await self.peers[(self.state.seen * 7) % len(self.peers)].send(Ping(hops=message.hops - 1))
        return self.state.seen


def trace(store: SQLiteStore, on_statement: Any) -> None:
    """Call ``on_statement(thread, sql)`` for every statement the store's connections run."""
    assert store._conn is not None and store._group is not None
    for connection in (store._conn._conn, store._group._here):
        if connection is not None:
            connection.set_trace_callback(lambda sql: on_statement(threading.get_ident(), sql))


async def relay_fifty(store: SQLiteStore) -> list[tuple[int, str]]:
    statements: list[tuple[int, str]] = []
    async with store, Runtime(store) as rt:
        trace(store, lambda thread, sql: statements.append((thread, sql)))
        Relay.peers = [await rt.spawn(Relay, str(i), durable=True) for i in range(50)]
        async with anyio.create_task_group() as tg:
            for i, ref in enumerate(Relay.peers):
                tg.start_soon(ref.send, Ping(hops=3 + i % 3))
        for ref in Relay.peers:  # each mailbox drains before its reply
            await ref.ask(Ping(hops=0))
    assert statements, "no statement was traced"
    return statements


async def test_at_full_no_statement_runs_on_the_loop(tmp_path: Path) -> None:
    statements = await relay_fifty(SQLiteStore(tmp_path / "relay.db", synchronous="FULL"))
    loop_thread = threading.get_ident()
    assert [sql for thread, sql in statements if thread == loop_thread] == []


async def test_at_normal_the_loop_runs_whole_write_transactions_only(tmp_path: Path) -> None:
    statements = await relay_fifty(SQLiteStore(tmp_path / "relay.db", synchronous="NORMAL"))
    loop_thread = threading.get_ident()
    on_loop = [sql for thread, sql in statements if thread == loop_thread]
    assert on_loop, "no write took the loop's path"
    # Every statement on the loop is a write transaction's: BEGIN IMMEDIATE (which
    # fails at once if the lock is taken), statements under that lock, COMMIT; or a
    # lone write statement, its own transaction (an append of one entry). Each
    # transaction writes something: no read-only operation, no checkpoint.
    def writes(statements: list[str]) -> list[str]:
        return [s for s in statements if s.lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE"))]

    lone = 0
    transaction: list[str] | None = None
    for sql in on_loop:
        if transaction is None and writes([sql]):
            lone += 1
        elif sql == "BEGIN IMMEDIATE":
            assert transaction is None
            transaction = []
        elif sql in ("COMMIT", "ROLLBACK"):
            assert transaction is not None
            assert writes(transaction), f"a transaction on the loop wrote nothing: {transaction}"
            transaction = None
        else:
            assert transaction is not None, f"{sql!r} ran on the loop outside a write transaction"
            transaction.append(sql)
    assert transaction is None
    assert lone, "no append of one entry took the loop's path"
    checkpoints = [thread for thread, sql in statements if "wal_checkpoint" in sql]
    # 50 actors x 4-6 messages x 2 boundaries: past the checkpoint interval at least once.
    assert checkpoints, "the WAL was never checkpointed"
    assert loop_thread not in checkpoints


async def test_a_write_held_up_by_another_process_waits_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another connection holds the write lock: the write goes to the thread and waits there."""
    # The test's own tasks make the writer's turn long (starting a worker thread), which
    # would send it to the thread without an inline try: here the loop counts as idle.
    monkeypatch.setattr(WritePolicy, "BUSY_LOOP", math.inf)
    path = tmp_path / "busy.db"
    loop_thread = threading.get_ident()
    waiting_on_thread = threading.Event()
    attempts: list[tuple[int, str]] = []  # where a write began: its BEGIN, or its lone INSERT

    def on_statement(thread: int, sql: str) -> None:
        if sql == "BEGIN IMMEDIATE" or (sql.startswith("INSERT") and thread == loop_thread):
            attempts.append((thread, sql.split()[0]))
            if thread != loop_thread:
                waiting_on_thread.set()

    async with SQLiteStore(path, synchronous="NORMAL", busy_timeout=20) as store:
        started = await store.start_execution(
            NewExecution(execution_id="ex", runner="r", root_path="agent:a"), owner="me", lease_seconds=600
        )
        assert started.lease is not None
        trace(store, on_statement)
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            async with anyio.create_task_group() as tg:
                seqs: list[int] = []

                async def write() -> None:
                    seqs.extend(await store.append(started.lease, [NewEntry(path="agent:a", label="x")]))

                tg.start_soon(write)
                # This wait needs the loop: a write blocking it would never let it finish.
                with anyio.fail_after(10):
                    await anyio.to_thread.run_sync(waiting_on_thread.wait)
                assert seqs == []
                other.execute("COMMIT")
        finally:
            other.close()
        assert seqs == [1]
        # Tried here first (one statement, its own transaction), found the lock taken,
        # and waited on the thread.
        assert attempts[0] == (loop_thread, "INSERT")
        assert attempts[-1][0] != loop_thread
        assert [e.label for e in await store.read_journal("ex")] == ["x"]
        # The lock is free again: the next write commits on the loop's thread.
        attempts.clear()
        await store.append(started.lease, [NewEntry(path="agent:a", label="y")])
        assert attempts == [(loop_thread, "INSERT")]
        # A write of several statements takes the lock first, with BEGIN IMMEDIATE.
        attempts.clear()
        await store.append(started.lease, [NewEntry(path="agent:a", label="z1"), NewEntry(path="agent:a", label="z2")])
        assert attempts[0] == (loop_thread, "BEGIN")
        assert [e.label for e in await store.read_journal("ex")] == ["x", "y", "z1", "z2"]


@pytest.mark.parametrize("synchronous", ["FULL", "NORMAL"])
async def test_the_wal_stays_bounded(tmp_path: Path, synchronous: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Checkpoints keep the WAL file from growing with the number of writes."""
    # At NORMAL, the WAL is made to start over once it holds RESTART_FRAMES: a round's
    # worth here, so that ten rounds cross it several times.
    monkeypatch.setattr(WritePolicy, "RESTART_FRAMES", 450)
    path = tmp_path / "wal.db"
    async with SQLiteStore(path, synchronous=synchronous) as store:  # type: ignore[arg-type]
        started = await store.start_execution(
            NewExecution(execution_id="ex", runner="r", root_path="agent:a"), owner="me", lease_seconds=600
        )
        assert started.lease is not None
        sizes = []
        for round_ in range(10):
            for i in range(300):
                await store.append(started.lease, [NewEntry(path="agent:a", label=f"{round_}/{i}", payload="x" * 200)])
            sizes.append(Path(f"{path}-wal").stat().st_size)
    # The file's size is its high-water mark: how far the WAL got before a checkpoint
    # caught up with it, which depends on how soon the connection's thread ran one. So the
    # bound is loose. Without checkpoints, it grows by a round's worth (sizes[0]) each round.
    assert sizes[-1] < len(sizes) * sizes[0] / 2, sizes


async def test_writes_batched_on_the_thread_checkpoint_there_too(tmp_path: Path) -> None:
    """Many writers at once: batches on the thread cross the checkpoint interval, and all commit."""
    path = tmp_path / "batched.db"
    async with SQLiteStore(path, synchronous="NORMAL") as store:
        leases = []
        for i in range(50):
            started = await store.start_execution(
                NewExecution(execution_id=f"ex{i}", runner="r", root_path="agent:a"), owner="me", lease_seconds=600
            )
            assert started.lease is not None
            leases.append(started.lease)
        checkpoints: list[int] = []
        trace(store, lambda thread, sql: checkpoints.append(thread) if "wal_checkpoint" in sql else None)

        async def writer(lease: Any) -> None:
            for i in range(20):
                await store.append(lease, [NewEntry(path="agent:a", label=str(i))])

        # (A write's caller waits for its outcome even when cancelled: a lost
        # batch job shows up as a hang, which pytest-timeout ends.)
        async with anyio.create_task_group() as tg:
            for lease in leases:
                tg.start_soon(writer, lease)
        for lease in leases:
            assert len(await store.read_journal(lease.execution_id)) == 20
    assert checkpoints, "1,000 writes and no checkpoint"
    assert threading.get_ident() not in checkpoints


async def test_a_big_batch_wakes_its_writers_a_few_per_loop_turn() -> None:
    """So that timers and I/O get a turn between them (the loop lag stays low under load)."""
    from tether.stores._bridge import threadsafe_scheduler
    from tether.stores._sqlite.writes import WAKE_PER_TURN, _wake_in_turns

    events = [anyio.Event() for _ in range(3 * WAKE_PER_TURN + 1)]
    _wake_in_turns(threadsafe_scheduler(), events)
    assert [e.is_set() for e in events].count(True) == WAKE_PER_TURN
    with anyio.fail_after(5):
        await events[-1].wait()  # the rest, on later turns
    assert all(e.is_set() for e in events)


async def test_a_failing_checkpoint_does_not_stop_the_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint that raises only leaves its work to the next one: every later write commits."""
    # Every write takes a turn, every turn counts as long: all writes go to the thread's
    # batches, which run the checkpoint themselves once it is due.
    monkeypatch.setattr(WritePolicy, "SLICE", 0.0)
    monkeypatch.setattr(WritePolicy, "BUSY_LOOP", -1.0)
    monkeypatch.setattr(WritePolicy, "CHECKPOINT_EVERY", 3)
    async with SQLiteStore(tmp_path / "failing.db", synchronous="NORMAL") as store:
        started = await store.start_execution(
            NewExecution(execution_id="ex", runner="r", root_path="agent:a"), owner="me", lease_seconds=600
        )
        assert started.lease is not None
        group = store._group
        assert group is not None
        real = group._conn._conn
        failed: list[str] = []

        class FailingCheckpoints:
            def __getattr__(self, name: str) -> Any:
                return getattr(real, name)

            def execute(self, sql: str, *args: Any) -> Any:
                if "wal_checkpoint" in sql:
                    failed.append(sql)
                    raise RuntimeError("the checkpoint failed")
                return real.execute(sql, *args)

        group._conn._connection = FailingCheckpoints()  # type: ignore[assignment]  # aiosqlite's own
        try:
            # (A write's caller waits for its outcome even when cancelled: a queue that
            # nobody serves any more shows up as a hang, which pytest-timeout ends.)
            for i in range(10):
                await store.append(started.lease, [NewEntry(path="agent:a", label=str(i))])
        finally:
            group._conn._connection = real
        assert len(failed) >= 2  # one failure did not stop the next checkpoint either
        assert [e.label for e in await store.read_journal("ex")] == [str(i) for i in range(10)]
