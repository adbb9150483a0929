"""The store's part of live executions: cancel requests, deadlines, retries of failed runs, threads."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import anyio
import pytest
from tether.stores import (
    ExecutionFinished,
    ExecutionNotFound,
    NewEntry,
    NewExecution,
    NewInterrupt,
    NotFailed,
    Store,
)

OWNER = "proc-a"


def new(execution_id: str | None = None, **fields: object) -> NewExecution:
    return NewExecution(execution_id=execution_id or f"ex-{uuid.uuid4().hex[:8]}", runner="refund",
                        root_path="chain:refund", fingerprint="f1", **fields)  # type: ignore[arg-type]


async def test_a_cancel_request_is_carried_by_every_lease_until_the_verdict(store: Store) -> None:
    started = await store.start_execution(new("c"), owner=OWNER, lease_seconds=60)
    assert started.lease is not None and started.lease.cancel is None
    asked = await store.request_cancel("c", by="ops:alice", reason="duplicate")
    assert asked is not None and asked.cancel is not None
    assert (asked.cancel["by"], asked.cancel["reason"]) == ("ops:alice", "duplicate")
    assert asked.wake_at is None  # running: its holder carries it out, not a worker
    again = await store.request_cancel("c", by="ops:bob", reason="second")
    assert again is not None and again.cancel == asked.cancel  # the first request stands
    renewed = await store.renew_lease(started.lease, lease_seconds=60)
    assert renewed.cancel == asked.cancel
    await store.release_lease(renewed, status="cancelled", entries=[NewEntry(path="chain:refund", label="cancelled")])
    done = await store.get_execution("c")
    assert done is not None and (done.status, done.cancel) == ("cancelled", None)
    assert (await store.request_cancel("c", by="x", reason="")) == done  # finished: left as it is


async def test_a_recorded_cancel_refuses_every_claim_and_consumes_nothing(store: Store) -> None:
    # Its holder looks alive, so the cancel waits for it; meanwhile a decision would be
    # journaled for a run that will not continue.
    started = await store.start_execution(new("w"), owner=OWNER, lease_seconds=60)
    assert started.lease is not None
    await store.suspend(started.lease, [NewEntry(path="chain:refund/node:a", label="suspended", kind="suspended")],
                        NewInterrupt(path="chain:refund/node:a", reason="approval"))
    await store.request_cancel("w", by="ops:alice", reason="withdrawn")
    with pytest.raises(ExecutionFinished, match="is cancelled"):
        await store.claim("w", {"approved": True}, owner=OWNER)
    with pytest.raises(ExecutionFinished, match="is cancelled"):
        await store.claim_and_lease("w", {"approved": True}, path="chain:refund/node:a", owner=OWNER,
                                    lease_seconds=60)
    [pending] = await store.list_pending(execution_id="w")
    assert pending.agent_path == "chain:refund/node:a"
    assert [e.kind for e in await store.read_journal("w")][-1] == "suspended"


async def test_a_cancel_of_an_idle_execution_wakes_workers_who_carry_it(store: Store) -> None:
    await store.enqueue_execution(new("q"))
    await store.request_cancel("q", by="ops", reason="")
    [lease] = await store.take_work(owner="worker", lease_seconds=30, limit=5)
    assert lease.execution_id == "q" and lease.cancel is not None
    assert await store.request_cancel("nobody", by="ops", reason="") is None


async def test_a_deadline_is_kept_and_handed_with_each_lease(store: Store) -> None:
    deadline = datetime(2030, 1, 2, 3, 4, 5, 6000, tzinfo=UTC)
    started = await store.start_execution(new("d", deadline=deadline), owner=OWNER, lease_seconds=60)
    assert started.lease is not None and started.lease.deadline == deadline
    await store.release_lease(started.lease)
    taken = await store.acquire_lease("d", owner="other", lease_seconds=60)
    assert taken.deadline == deadline
    assert (await store.get_execution("d")).deadline == deadline  # type: ignore[union-attr]


async def test_reopen_retries_only_a_failed_execution(store: Store) -> None:
    started = await store.start_execution(new("f"), owner=OWNER, lease_seconds=60)
    assert started.lease is not None
    with pytest.raises(NotFailed, match="it is running"):
        await store.reopen("f", by="ops")
    await store.release_lease(started.lease, status="failed", error="Boom: once")
    before = await store.read_journal("f")
    reopened = await store.reopen("f", by="cli:carol")
    assert (reopened.status, reopened.error, reopened.lease_owner) == ("running", None, None)
    [retried] = (await store.read_journal("f"))[len(before):]
    assert (retried.path, retried.label, retried.payload) == ("chain:refund", "retried", {"by": "cli:carol"})
    [lease] = await store.take_work(owner="worker", lease_seconds=30, limit=5)  # continued at once
    assert lease.execution_id == "f"
    with pytest.raises(ExecutionNotFound):
        await store.reopen("nobody", by="ops")


async def test_threads_list_their_runs(store: Store) -> None:
    for n, thread in enumerate(["chat-7", "chat-7", "chat-8", None]):
        await store.enqueue_execution(new(f"r{n}", thread=thread))
        await anyio.lowlevel.checkpoint()
    threads = await store.list_threads()
    assert [(t.thread, t.runs, t.latest.execution_id) for t in threads] == [("chat-7", 2, "r1"), ("chat-8", 1, "r2")]
    assert [t.thread for t in await store.list_threads(after="chat-7")] == ["chat-8"]
    assert [e.execution_id for e in await store.list_executions(thread="chat-7")] == ["r0", "r1"]
    assert [e.execution_id for e in await store.list_executions(thread="chat-7", recent=True, limit=1)] == ["r1"]
    assert (await store.get_execution("r0")).thread == "chat-7"  # type: ignore[union-attr]


async def test_prune_keeps_a_thread_whole_while_its_latest_run_is_recent(store: Store) -> None:
    for execution_id, thread in [("t1", "chat"), ("t2", "chat"), ("solo", None)]:
        started = await store.start_execution(new(execution_id, thread=thread), owner=OWNER, lease_seconds=60)
        assert started.lease is not None
        await store.release_lease(started.lease, status="completed")
    live = await store.start_execution(new("t3", thread="chat"), owner=OWNER, lease_seconds=60)
    later = datetime.now(UTC) + timedelta(hours=1)
    assert await store.prune(older_than=later) == 1  # only the run of no thread: t3 still runs
    assert [e.execution_id for e in await store.list_executions(thread="chat")] == ["t1", "t2", "t3"]
    assert live.lease is not None
    await store.release_lease(live.lease, status="completed")
    assert await store.prune(older_than=later) == 3  # the whole thread, together
    assert await store.list_threads() == []
