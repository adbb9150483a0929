"""The Store contract, checked against every store on both anyio backends."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest
from tether.stores import (
    AlreadyResumed,
    ConfigurationError,
    DuplicateInterrupt,
    ExecutionFinished,
    ExecutionNotFound,
    Lease,
    LeaseHeld,
    NewEntry,
    NewExecution,
    NewInterrupt,
    NoPendingInterrupt,
    StaleLease,
    Store,
)
from tether.stores._postgres import store as postgres_store
from tether.stores._sqlite import store as sqlite_store

from tests.conftest import make_store

OWNER = "proc-a"


def new(execution_id: str | None = None, **input: object) -> NewExecution:
    return NewExecution(
        execution_id=execution_id or f"ex-{uuid.uuid4().hex[:8]}",
        runner="refund",
        root_path="chain:refund",
        fingerprint="f1",
        input=dict(input),
    )


async def started(store: Store, execution_id: str | None = None) -> Lease:
    result = await store.start_execution(new(execution_id), owner=OWNER, lease_seconds=60)
    assert result.created and result.lease is not None
    return result.lease


def entry(label: str, payload: object = None, path: str = "chain:refund/node:a") -> NewEntry:
    return NewEntry(path=path, label=label, payload=payload)  # type: ignore[arg-type]


async def paused(store: Store, path: str = "chain:refund/node:approve") -> tuple[Lease, int]:
    """An execution suspended at ``path``; returns its (released) lease and pending seq."""
    lease = await started(store)
    pending = await store.suspend(
        lease,
        [entry("snapshot", {"state": 1}, path).model_copy(update={"kind": "snapshot"}),
         entry("node:approve", None, path).model_copy(update={"kind": "suspended"})],
        NewInterrupt(path=path, reason="manager_approval", context={"amount": 50_000}),
    )
    await store.release_lease(lease, status="paused")
    return lease, pending.seq


# -- executions ----------------------------------------------------------------


async def test_start_creates_once_and_returns_existing(store: Store) -> None:
    first = await store.start_execution(new("job-1", amount=5), owner=OWNER, lease_seconds=60)
    again = await store.start_execution(new("job-1", amount=999), owner="proc-b", lease_seconds=60)
    assert first.created and first.lease is not None and first.lease.epoch == 1
    assert not again.created and again.lease is None
    assert again.execution.input == {"amount": 5}
    assert again.execution.status == "running"
    assert again.execution.lease_owner == OWNER
    fetched = await store.get_execution("job-1")
    assert fetched == again.execution
    assert await store.get_execution("nope") is None


async def test_list_executions_filters_and_pages(store: Store) -> None:
    ids = [f"ex-{i}" for i in range(5)]
    for execution_id in ids:
        lease = await started(store, execution_id)
        if execution_id in ("ex-1", "ex-3"):
            await store.release_lease(lease, status="completed", result={"ok": True})
    assert [e.execution_id for e in await store.list_executions()] == ids
    done = await store.list_executions(status="completed")
    assert [e.execution_id for e in done] == ["ex-1", "ex-3"]
    assert done[0].result == {"ok": True}
    page1 = await store.list_executions(limit=2)
    page2 = await store.list_executions(limit=2, after=page1[-1])
    page3 = await store.list_executions(limit=2, after=page2[-1])
    assert [e.execution_id for e in page1 + page2 + page3] == ids



async def test_recent_lists_the_most_recently_updated_first_across_the_table(store: Store) -> None:
    ids = [f"ex-{i}" for i in range(5)]
    leases = {execution_id: await started(store, execution_id) for execution_id in ids}
    await store.release_lease(leases["ex-0"], status="completed", result=1)  # the oldest, updated last
    recent = await store.list_executions(recent=True)
    assert recent[0].execution_id == "ex-0"
    assert [e.execution_id for e in recent[1:]] == ["ex-4", "ex-3", "ex-2", "ex-1"]
    page1 = await store.list_executions(recent=True, limit=2)
    page2 = await store.list_executions(recent=True, limit=2, after=page1[-1])
    page3 = await store.list_executions(recent=True, limit=2, after=page2[-1])
    assert page1 + page2 + page3 == recent
    assert [e.execution_id for e in await store.list_executions(recent=True, status="running", limit=1)] == ["ex-4"]

# -- journal -------------------------------------------------------------------


async def test_append_numbers_entries_in_order(store: Store) -> None:
    lease = await started(store)
    assert await store.append(lease, [entry("node:a", {"x": 1})]) == [1]
    assert await store.append(lease, [entry("node:b", [1, 2]), entry("node:c", "s")]) == [2, 3]
    assert await store.append(lease, []) == []
    journal = await store.read_journal(lease.execution_id)
    assert [(e.seq, e.label, e.payload) for e in journal] == [
        (1, "node:a", {"x": 1}), (2, "node:b", [1, 2]), (3, "node:c", "s")
    ]
    assert all(e.kind == "entry" and e.path == "chain:refund/node:a" for e in journal)
    assert [e.seq for e in await store.read_journal(lease.execution_id, after_seq=1)] == [2, 3]
    assert [e.seq for e in await store.read_journal(lease.execution_id, limit=2)] == [1, 2]


async def test_load_execution_reads_the_row_and_its_whole_journal(store: Store) -> None:
    assert await store.load_execution("nobody") is None
    lease = await started(store)
    empty = await store.load_execution(lease.execution_id)
    assert empty is not None and empty[1] == []
    await store.append(lease, [entry("node:a", {"x": 1}), entry("node:b", None)])
    loaded = await store.load_execution(lease.execution_id)
    assert loaded is not None
    execution, journal = loaded
    assert execution == await store.get_execution(lease.execution_id)
    assert journal == await store.read_journal(lease.execution_id)
    assert [(e.seq, e.label, e.payload) for e in journal] == [(1, "node:a", {"x": 1}), (2, "node:b", None)]


async def test_an_entry_appended_by_another_connection_is_numbered_in(
    db_store: Store, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # A store may remember the number it expects next; another process's entry in
    # between must neither be overwritten nor leave a gap.
    lease = await started(db_store)
    assert await db_store.append(lease, [entry("a")]) == [1]
    async with make_store(request.node.callspec.params["db_store"], tmp_path, request) as other:
        assert await other.append(lease, [entry("b")]) == [2]
    assert await db_store.append(lease, [entry("c")]) == [3]
    assert await db_store.append(lease, [entry("d")]) == [4]
    assert [(e.seq, e.label) for e in await db_store.read_journal(lease.execution_id)] == [
        (1, "a"), (2, "b"), (3, "c"), (4, "d")
    ]


async def test_a_journal_started_again_is_numbered_from_one(store: Store) -> None:
    lease = await started(store, "again")
    assert await store.append(lease, [entry("a")]) == [1]
    assert await store.append(lease, [entry("b")]) == [2]
    assert await store.delete_execution("again")
    lease = await started(store, "again")  # the same id, owner and epoch as before
    assert await store.append(lease, [entry("c")]) == [1]
    assert [e.seq for e in await store.read_journal("again")] == [1]


async def test_payloads_round_trip_exactly(store: Store) -> None:
    lease = await started(store)
    payloads: list[object] = [
        None, True, 0, -(2**62), 2**62, 1.5, "", "é ✓ 你好 \U0001f600", "\x00nul",
        "'; DROP TABLE tether_journal; --", {"nested": {"deep": [1, {"k": None}]}},
        {"b": 1, "a": 2}, [],
    ]
    await store.append(lease, [entry(f"p{i}", p) for i, p in enumerate(payloads)])
    journal = await store.read_journal(lease.execution_id)
    assert [e.payload for e in journal] == payloads
    assert list(journal[11].payload) == ["b", "a"]  # type: ignore[arg-type]  # key order kept


async def test_journals_are_per_execution(store: Store) -> None:
    a, b = await started(store), await started(store)
    await store.append(a, [entry("a1"), entry("a2")])
    await store.append(b, [entry("b1")])
    await store.append(a, [entry("a3")])
    assert [(e.seq, e.label) for e in await store.read_journal(a.execution_id)] == [
        (1, "a1"), (2, "a2"), (3, "a3")
    ]
    assert [(e.seq, e.label) for e in await store.read_journal(b.execution_id)] == [(1, "b1")]


async def test_concurrent_appends_get_distinct_consecutive_seqs(store: Store) -> None:
    lease = await started(store)
    seqs: list[int] = []

    async def writer(i: int) -> None:
        seqs.extend(await store.append(lease, [entry(f"w{i}")]))

    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(writer, i)
    assert sorted(seqs) == list(range(1, 21))
    assert [e.seq for e in await store.read_journal(lease.execution_id)] == list(range(1, 21))


async def test_a_fenced_write_among_concurrent_ones_fails_alone(store: Store) -> None:
    """Writes sharing a commit (SQLite's group commit): one's failure undoes only that one."""
    lease = await started(store)
    stale = lease.model_copy(update={"epoch": lease.epoch - 1})
    seqs: list[int] = []
    fenced: list[int] = []

    async def writer(i: int) -> None:
        try:
            seqs.extend(await store.append(stale if i % 5 == 2 else lease, [entry(f"w{i}")]))
        except StaleLease:
            fenced.append(i)

    async with anyio.create_task_group() as tg:
        for i in range(30):
            tg.start_soon(writer, i)
    assert sorted(fenced) == [i for i in range(30) if i % 5 == 2]
    journal = await store.read_journal(lease.execution_id)
    assert sorted(e.label for e in journal) == sorted(f"w{i}" for i in range(30) if i % 5 != 2)
    assert sorted(seqs) == [e.seq for e in journal] == list(range(1, 25))


# -- leases and fencing --------------------------------------------------------


async def test_live_lease_is_exclusive(store: Store) -> None:
    lease = await started(store)
    with pytest.raises(LeaseHeld) as info:
        await store.acquire_lease(lease.execution_id, owner="proc-b", lease_seconds=60)
    assert info.value.owner == OWNER
    assert "proc-a" in str(info.value)
    assert 50 < info.value.seconds_left <= 60  # what a recovering process waits out
    same = await store.acquire_lease(lease.execution_id, owner=OWNER, lease_seconds=60)
    assert same.epoch == lease.epoch + 1


async def test_expired_lease_is_taken_over_and_old_holder_is_fenced(store: Store) -> None:
    result = await store.start_execution(new(), owner=OWNER, lease_seconds=0)
    old = result.lease
    assert old is not None
    await store.append(old, [entry("before")])
    new_lease = await store.acquire_lease(old.execution_id, owner="proc-b", lease_seconds=60)
    assert new_lease.epoch == old.epoch + 1 and new_lease.owner == "proc-b"

    with pytest.raises(StaleLease):
        await store.append(old, [entry("stale")])
    with pytest.raises(StaleLease):
        await store.renew_lease(old, lease_seconds=60)
    with pytest.raises(StaleLease):
        await store.put_idempotent(old, "k", 1)
    with pytest.raises(StaleLease):
        await store.suspend(old, [entry("s")], NewInterrupt(path="p", reason="r"))
    with pytest.raises(StaleLease):
        await store.release_lease(old, status="completed", result=1)

    assert [e.label for e in await store.read_journal(old.execution_id)] == ["before"]
    assert await store.count_pending(execution_id=old.execution_id) == 0
    execution = await store.get_execution(old.execution_id)
    assert execution is not None and execution.status == "running"
    assert execution.lease_owner == "proc-b" and execution.lease_epoch == new_lease.epoch
    assert await store.append(new_lease, [entry("after")]) == [2]



async def test_a_lease_known_dead_is_replaced_before_it_expires(store: Store) -> None:
    lease = await started(store)  # 60 s left: its owner died, and a recoverer proved it
    with pytest.raises(LeaseHeld):
        await store.acquire_lease(lease.execution_id, owner="proc-b", lease_seconds=60, replacing="proc-other")
    taken = await store.acquire_lease(lease.execution_id, owner="proc-b", lease_seconds=60, replacing=OWNER)
    assert taken.owner == "proc-b" and taken.epoch == lease.epoch + 1
    with pytest.raises(StaleLease):  # the dead owner, if it comes back, is fenced out
        await store.append(lease, [entry("late")])
    # Replacing names one owner: the new holder's live lease is not taken by that name.
    with pytest.raises(LeaseHeld):
        await store.acquire_lease(lease.execution_id, owner="proc-c", lease_seconds=60, replacing=OWNER)

async def test_renew_extends_and_release_gives_up(store: Store) -> None:
    lease = await started(store)
    renewed = await store.renew_lease(lease, lease_seconds=3600)
    assert renewed.epoch == lease.epoch and renewed.expires_at > lease.expires_at
    await store.release_lease(renewed)
    execution = await store.get_execution(lease.execution_id)
    assert execution is not None
    assert execution.lease_owner is None and execution.status == "running"
    with pytest.raises(StaleLease):
        await store.append(renewed, [entry("x")])
    other = await store.acquire_lease(lease.execution_id, owner="proc-b", lease_seconds=60)
    assert other.epoch == lease.epoch + 1


async def test_lease_errors_name_the_problem(store: Store) -> None:
    with pytest.raises(ExecutionNotFound):
        await store.acquire_lease("missing", owner=OWNER, lease_seconds=1)
    lease = await started(store)
    await store.release_lease(lease, status="failed", error="boom")
    with pytest.raises(ExecutionFinished) as info:
        await store.acquire_lease(lease.execution_id, owner=OWNER, lease_seconds=1)
    assert info.value.status == "failed"
    ghost = Lease(execution_id="missing", owner=OWNER, epoch=1, expires_at=datetime.now(UTC))
    with pytest.raises(ExecutionNotFound):
        await store.append(ghost, [entry("x")])


async def test_release_with_final_status_stores_outcome(store: Store) -> None:
    lease = await started(store)
    seqs = await store.release_lease(
        lease, status="completed", result={"approved": True}, entries=[entry("node:end", 1)]
    )
    assert seqs == [1]
    execution = await store.get_execution(lease.execution_id)
    assert execution is not None
    assert (execution.status, execution.result, execution.error) == ("completed", {"approved": True}, None)
    assert execution.finished and execution.lease_owner is None


# -- suspend and claim ---------------------------------------------------------


async def test_suspend_writes_entries_and_pending_row_together(store: Store) -> None:
    lease = await started(store)
    await store.append(lease, [entry("node:a")])
    path = "supervisor:planner/worker:auditor/tool:approve_refund"
    pending = await store.suspend(
        lease,
        [NewEntry(path=path, label="turn:1", kind="snapshot", payload={"messages": 3}),
         NewEntry(path=path, label="turn:1/tool:approve_refund", kind="suspended")],
        NewInterrupt(path=path, reason="manager_approval", context={"amount": 50_000}),
    )
    assert (pending.agent_path, pending.reason, pending.context, pending.seq) == (
        path, "manager_approval", {"amount": 50_000}, 3
    )
    assert await store.list_pending() == [pending]
    kinds = [e.kind for e in await store.read_journal(lease.execution_id)]
    assert kinds == ["entry", "snapshot", "suspended"]


async def test_duplicate_suspension_writes_nothing(store: Store) -> None:
    lease = await started(store)
    interrupt = NewInterrupt(path="agent:a/tool:t", reason="r")
    await store.suspend(lease, [entry("s1")], interrupt)
    with pytest.raises(DuplicateInterrupt):
        await store.suspend(lease, [entry("s2"), entry("s3")], interrupt)
    assert [e.label for e in await store.read_journal(lease.execution_id)] == ["s1"]
    assert await store.append(lease, [entry("next")]) == [2]


async def test_claim_consumes_once_and_journals_the_decision(store: Store) -> None:
    lease, seq = await paused(store)
    value = {"approved": True, "metadata": {"approver": "alice"}, "amount": 120}
    resumed = await store.claim(lease.execution_id, value, path="chain:refund/node:approve")
    assert resumed.kind == "resumed" and resumed.path == "chain:refund/node:approve"
    assert resumed.payload == {"value": value, "suspended_seq": seq, "reason": "manager_approval"}
    assert resumed.seq == seq + 1
    journal = await store.read_journal(lease.execution_id)
    assert journal[-1] == resumed
    assert await store.count_pending() == 0
    with pytest.raises(AlreadyResumed) as info:
        await store.claim(lease.execution_id, {"approved": False}, path="chain:refund/node:approve")
    assert info.value.path == "chain:refund/node:approve"
    with pytest.raises(AlreadyResumed):
        await store.claim(lease.execution_id, {"approved": False})
    assert len(await store.read_journal(lease.execution_id)) == len(journal)



async def test_a_claim_marks_a_paused_execution_decided_for_workers(store: Store) -> None:
    lease, _ = await paused(store)
    before = await store.get_execution(lease.execution_id)
    assert before is not None and before.status == "paused" and before.wake_at is None
    await store.claim(lease.execution_id, {"approved": True}, by="cli:alice")
    after = await store.get_execution(lease.execution_id)
    assert after is not None and after.status == "decided"
    assert after.wake_at is not None and after.updated_at > before.updated_at
    [resumed] = [e for e in await store.read_journal(lease.execution_id) if e.kind == "resumed"]
    assert resumed.payload["by"] == "cli:alice"  # type: ignore[index, call-overload]
    [taken] = await store.take_work(owner="worker", lease_seconds=60, limit=5)
    assert taken.execution_id == lease.execution_id
    running = await store.get_execution(lease.execution_id)
    assert running is not None and running.status == "running" and running.wake_at is None


async def test_a_cancelled_execution_says_so_to_a_late_claim(store: Store) -> None:
    lease, seq = await paused(store)
    path = "chain:refund/node:approve"
    await store.claim(lease.execution_id, {"approved": True}, path=path)
    cancelling = await store.acquire_lease(lease.execution_id, owner=OWNER, lease_seconds=60)
    await store.release_lease(cancelling, status="cancelled")
    for late in ({"path": path}, {"path": path, "seq": seq}, {}):
        with pytest.raises(ExecutionFinished, match="cancelled"):
            await store.claim(lease.execution_id, {"approved": False}, **late)  # type: ignore[arg-type]

async def test_claim_without_path_needs_exactly_one_pending(store: Store) -> None:
    lease = await started(store)
    for path in ("team:t/worker:a/tool:x", "team:t/worker:b/tool:x"):
        await store.suspend(lease, [entry("s", path=path)], NewInterrupt(path=path, reason="r"))
    with pytest.raises(NoPendingInterrupt) as info:
        await store.claim(lease.execution_id, True, owner=OWNER)
    assert info.value.pending == ["team:t/worker:a/tool:x", "team:t/worker:b/tool:x"]
    assert await store.count_pending() == 2
    await store.claim(lease.execution_id, True, path="team:t/worker:b/tool:x", owner=OWNER)
    last = await store.claim(lease.execution_id, False, owner=OWNER)
    assert last.path == "team:t/worker:a/tool:x"


async def test_claim_pinned_to_a_suspension_refuses_a_later_one(store: Store) -> None:
    lease = await started(store)
    path = "agent:a/tool:approve"
    first = await store.suspend(lease, [entry("s1", path=path)], NewInterrupt(path=path, reason="one"))
    await store.claim(lease.execution_id, True, path=path, seq=first.seq, owner=OWNER)
    second = await store.suspend(lease, [entry("s2", path=path)], NewInterrupt(path=path, reason="two"))
    # A late duplicate click for the first approval must not approve the second.
    with pytest.raises(AlreadyResumed):
        await store.claim(lease.execution_id, True, path=path, seq=first.seq, owner=OWNER)
    assert await store.list_pending() == [second]
    await store.claim(lease.execution_id, False, path=path, seq=second.seq, owner=OWNER)


async def test_no_claim_while_another_process_runs_the_execution(store: Store) -> None:
    lease = await started(store)
    path = "agent:a/tool:t"
    await store.suspend(lease, [entry("s", path=path)], NewInterrupt(path=path, reason="r"))
    # The execution runs elsewhere (its lease is live): a decision claimed now could not
    # be carried out by the claimer, so nothing is consumed.
    with pytest.raises(LeaseHeld):
        await store.claim(lease.execution_id, True, path=path, owner="proc-b")
    assert await store.count_pending() == 1
    assert len(await store.read_journal(lease.execution_id)) == 1  # no "resumed" entry
    await store.claim(lease.execution_id, True, path=path, owner=OWNER)  # the holder may
    assert await store.count_pending() == 0


async def test_claim_errors_say_why(store: Store) -> None:
    with pytest.raises(ExecutionNotFound):
        await store.claim("missing", True)
    lease = await started(store)
    with pytest.raises(NoPendingInterrupt, match="no pending interrupt"):
        await store.claim(lease.execution_id, True)
    await store.suspend(lease, [entry("s")], NewInterrupt(path="agent:a/tool:t", reason="r"))
    with pytest.raises(NoPendingInterrupt, match=r"agent:a/tool:t"):
        await store.claim(lease.execution_id, True, path="agent:a/tool:other")
    assert await store.count_pending() == 1


async def test_concurrent_claims_have_one_winner(store: Store) -> None:
    lease, _ = await paused(store)
    outcomes: list[str] = []

    async def claimer(i: int) -> None:
        try:
            await store.claim(lease.execution_id, {"by": i}, path="chain:refund/node:approve")
            outcomes.append("won")
        except AlreadyResumed:
            outcomes.append("lost")

    async with anyio.create_task_group() as tg:
        for i in range(10):
            tg.start_soon(claimer, i)
    assert sorted(outcomes) == ["lost"] * 9 + ["won"]
    resumed = [e for e in await store.read_journal(lease.execution_id) if e.kind == "resumed"]
    assert len(resumed) == 1


async def test_a_claim_and_lease_hands_the_decided_run_to_the_claimer(store: Store) -> None:
    lease, seq = await paused(store)
    path = "chain:refund/node:approve"
    resumed, taken = await store.claim_and_lease(lease.execution_id, {"approved": True}, owner="proc-b",
                                                 lease_seconds=60, path=path, by="cli:alice")
    assert resumed.payload == {"value": {"approved": True}, "suspended_seq": seq, "reason": "manager_approval",
                               "by": "cli:alice"}
    assert taken is not None and (taken.owner, taken.epoch) == ("proc-b", lease.epoch + 1)
    running = await store.get_execution(lease.execution_id)
    assert running is not None and (running.status, running.lease_owner, running.wake_at) == (
        "running", "proc-b", None)
    assert await store.take_work(owner="worker", lease_seconds=60, limit=5) == []  # it is the claimer's
    assert await store.append(taken, [entry("node:approve", path=path)]) == [resumed.seq + 1]
    with pytest.raises(AlreadyResumed):
        await store.claim_and_lease(lease.execution_id, {"approved": False}, owner="proc-c", lease_seconds=60)
    with pytest.raises(StaleLease):
        await store.append(lease, [entry("late")])


async def test_a_claim_and_lease_refused_by_a_live_lease_consumes_nothing(store: Store) -> None:
    lease = await started(store)
    path = "agent:a/tool:t"
    await store.suspend(lease, [entry("s", path=path)], NewInterrupt(path=path, reason="r"))
    with pytest.raises(LeaseHeld):
        await store.claim_and_lease(lease.execution_id, True, owner="proc-b", lease_seconds=60, path=path)
    assert await store.count_pending() == 1
    assert len(await store.read_journal(lease.execution_id)) == 1
    assert (await store.get_execution(lease.execution_id)).lease_owner == OWNER  # type: ignore[union-attr]


async def test_the_default_claim_and_lease_makes_the_two_calls(store: Store) -> None:
    # What a store without its own one-transaction version does: claim, then acquire_lease.
    lease, _ = await paused(store)
    resumed, taken = await Store.claim_and_lease(store, lease.execution_id, True, owner="proc-b",
                                                 lease_seconds=60)
    assert resumed.kind == "resumed" and taken is not None and taken.epoch == lease.epoch + 1
    assert (await store.get_execution(lease.execution_id)).status == "running"  # type: ignore[union-attr]


async def test_final_status_clears_pending(store: Store) -> None:
    lease = await started(store)
    await store.suspend(lease, [entry("s")], NewInterrupt(path="agent:a/tool:t", reason="r"))
    await store.release_lease(lease, status="cancelled")
    assert await store.count_pending() == 0
    with pytest.raises(ExecutionFinished, match="cancelled"):
        await store.claim(lease.execution_id, True, path="agent:a/tool:t")


# -- listing pending -----------------------------------------------------------


async def test_rewrite_replaces_journal_pending_and_version_in_one_write(store: Store) -> None:
    _, pending_seq = await paused(store)
    [execution] = await store.list_executions()
    before = await store.read_journal(execution.execution_id)
    [row] = await store.list_pending(execution_id=execution.execution_id)
    lease = await store.acquire_lease(execution.execution_id, owner=OWNER, lease_seconds=60)
    renamed = [e.model_copy(update={"path": e.path.replace("node:approve", "node:sign_off")}) for e in before]
    moved = row.model_copy(update={"agent_path": "chain:refund/node:sign_off"})
    await store.rewrite(lease, renamed, pending=[moved], version="2", fingerprint="f2")
    [seq] = await store.append(lease, [entry("migrated", {"to": "2"})])
    await store.release_lease(lease, status="paused")

    after = await store.read_journal(execution.execution_id)
    assert [(e.seq, e.path, e.created_at, e.payload) for e in after[:-1]] == \
        [(e.seq, e.path, e.created_at, e.payload) for e in renamed]
    assert seq == before[-1].seq + 1 == after[-1].seq
    [now_pending] = await store.list_pending(execution_id=execution.execution_id)
    assert (now_pending.agent_path, now_pending.seq, now_pending.created_at) == \
        ("chain:refund/node:sign_off", pending_seq, row.created_at)
    changed = await store.get_execution(execution.execution_id)
    assert changed is not None and (changed.version, changed.fingerprint, changed.status) == ("2", "f2", "paused")
    claimed = await store.claim(execution.execution_id, {"approved": True}, path="chain:refund/node:sign_off")
    assert claimed.payload["suspended_seq"] == pending_seq  # type: ignore[index]


async def test_a_rewrite_with_a_stale_lease_writes_nothing(store: Store) -> None:
    old = await started(store)
    await store.append(old, [entry("node:a", 1)])
    await store.release_lease(old)
    await store.acquire_lease(old.execution_id, owner="proc-b", lease_seconds=60)
    with pytest.raises(StaleLease):
        await store.rewrite(old, [], pending=[], version="2", fingerprint="f2")
    assert [e.label for e in await store.read_journal(old.execution_id)] == ["node:a"]
    execution = await store.get_execution(old.execution_id)
    assert execution is not None and (execution.version, execution.fingerprint) == ("", "f1")


async def test_an_execution_keeps_the_version_it_started_on(store: Store) -> None:
    started_on = await store.start_execution(new().model_copy(update={"version": "7"}), owner=OWNER,
                                             lease_seconds=60)
    queued = await store.enqueue_execution(new())
    assert started_on.execution.version == "7" and queued.execution.version == ""
    again = await store.get_execution(started_on.execution.execution_id)
    assert again is not None and again.version == "7"


async def test_list_pending_filters_by_prefix_and_pages_oldest_first(store: Store) -> None:
    paths = [
        "supervisor:planner/worker:auditor/tool:approve_refund",
        "supervisor:planner/worker:researcher/tool:publish",
        "swarm:content/agent:analyst/tool:approve_publish",
        "agent:refund-bot/tool:approve_refund",
        "supervisor:planner_v2/worker:x/tool:y",
    ]
    made = []
    for path in paths:
        lease = await started(store)
        made.append(await store.suspend(lease, [entry("s", path=path)],
                                        NewInterrupt(path=path, reason="r", context={"p": path})))
    everything = await store.list_pending()
    assert everything == made
    under = await store.list_pending(path_prefix="supervisor:planner/")
    assert [p.agent_path for p in under] == paths[:2]
    assert await store.count_pending(path_prefix="supervisor:planner/") == 2
    assert await store.count_pending(path_prefix="supervisor:planner") == 3
    assert await store.count_pending(path_prefix="%") == 0
    assert await store.count_pending(execution_id=made[3].execution_id) == 1
    page, seen = await store.list_pending(limit=2), []
    while page:
        seen += page
        page = await store.list_pending(limit=2, after=page[-1])
    assert seen == made


@pytest.mark.parametrize("few", [1000, 3], ids=["through the path index", "walking the age index"])
async def test_a_prefix_lists_the_same_rows_whichever_index_reads_them(
        store: Store, monkeypatch: pytest.MonkeyPatch, few: int) -> None:
    # Under FEW_UNDER_PREFIX matches a prefix is read by the path index, from it on in age order.
    for module in (sqlite_store, postgres_store):
        monkeypatch.setattr(module, "FEW_UNDER_PREFIX", few)
    paths = [f"supervisor:planner/worker:{w}/tool:t{i}" for i, w in enumerate("abcab")]
    paths[2:2] = ["supervisor:planner2/worker:a/tool:t", "agent:x/tool:y"]  # just outside the prefix
    made = []
    for path in paths:
        lease = await started(store)
        made.append(await store.suspend(lease, [entry("s", path=path)], NewInterrupt(path=path, reason="r")))
    under = [p for p in made if p.agent_path.startswith("supervisor:planner/")]
    page, seen = await store.list_pending(path_prefix="supervisor:planner/", limit=2), []
    while page:
        seen += page
        page = await store.list_pending(path_prefix="supervisor:planner/", limit=2, after=page[-1])
    assert seen == under
    assert await store.list_pending(path_prefix="supervisor:planner/worker:a/") == [made[0], made[5]]
    assert await store.list_pending(path_prefix="supervisor:planner/", limit=3) == under[:3]
    assert await store.count_pending(path_prefix="supervisor:planner/") == 5
    assert await store.list_pending(path_prefix="supervisor:planner/worker:z/") == []


# -- idempotency ---------------------------------------------------------------


async def test_idempotency_first_record_wins(store: Store) -> None:
    lease = await started(store)
    assert await store.get_idempotent(lease.execution_id, "charge#1") is None
    first = await store.put_idempotent(lease, "charge#1", {"charge_id": "ch_1", "amount": 50})
    again = await store.put_idempotent(lease, "charge#1", {"charge_id": "ch_2"})
    assert first.value == again.value == {"charge_id": "ch_1", "amount": 50}
    got = await store.get_idempotent(lease.execution_id, "charge#1")
    assert got is not None and got.value == first.value
    other = await started(store)
    assert await store.get_idempotent(other.execution_id, "charge#1") is None


# -- maintenance ---------------------------------------------------------------


async def test_take_work_gives_a_versioned_run_only_to_a_worker_with_its_version(store: Store) -> None:
    for execution_id, version in (("v1", "1"), ("v2", "2"), ("none", "")):
        await store.enqueue_execution(new(execution_id).model_copy(update={"version": version}))
    leases = await store.take_work(owner=OWNER, lease_seconds=60, limit=10, roots=["chain:refund"],
                                   versions={"chain:refund": ["2"]})
    assert sorted(lease.execution_id for lease in leases) == ["none", "v2"]
    rest = await store.take_work(owner=OWNER, lease_seconds=60, limit=10, roots=["chain:refund"])
    assert [lease.execution_id for lease in rest] == ["v1"]  # without versions: any


async def test_list_idempotent_gives_an_executions_records_only(store: Store) -> None:
    lease, other = await started(store), await started(store)
    await store.put_idempotent(lease, "k2", {"v": 2})
    await store.put_idempotent(lease, "k1", [1])
    await store.put_idempotent(other, "k3", None)
    records = await store.list_idempotent(lease.execution_id)
    assert [(r.key, r.value) for r in records] == [("k1", [1]), ("k2", {"v": 2})]
    assert await store.list_idempotent("nobody") == []


async def test_delete_execution_removes_everything(store: Store) -> None:
    lease = await started(store)
    await store.put_idempotent(lease, "k", 1)
    await store.suspend(lease, [entry("s")], NewInterrupt(path="agent:a/tool:t", reason="r"))
    keep = await started(store)
    await store.append(keep, [entry("kept")])
    assert await store.delete_execution(lease.execution_id) is True
    assert await store.delete_execution(lease.execution_id) is False
    assert await store.get_execution(lease.execution_id) is None
    assert await store.read_journal(lease.execution_id) == []
    assert await store.get_idempotent(lease.execution_id, "k") is None
    assert await store.count_pending() == 0
    assert len(await store.read_journal(keep.execution_id)) == 1


async def test_prune_removes_old_finished_and_never_paused_or_running(store: Store) -> None:
    done = await started(store, "done")
    await store.append(done, [entry("x")])
    await store.release_lease(done, status="completed", result=1)
    failed = await started(store, "failed")
    await store.release_lease(failed, status="failed", error="e")
    await paused(store)
    await started(store, "running")
    assert await store.prune(older_than=datetime.now(UTC) - timedelta(days=1)) == 0
    assert await store.prune(older_than=datetime.now(UTC) + timedelta(seconds=5)) == 2
    remaining = sorted(e.status for e in await store.list_executions())
    assert remaining == ["paused", "running"]
    assert await store.read_journal("done") == []
    assert await store.count_pending() == 1


# -- setup ---------------------------------------------------------------------


async def test_setup_twice_is_harmless(store: Store) -> None:
    lease = await started(store)
    await store.setup()
    await store.setup()
    assert await store.append(lease, [entry("x")]) == [1]


# -- found in review: races and edge cases every store must agree on -------------


async def test_concurrent_idempotent_puts_agree_on_the_first_value(store: Store) -> None:
    lease = await started(store)
    results: dict[str, list[object]] = {}

    async def put(key: str, value: int) -> None:
        record = await store.put_idempotent(lease, key, value)
        results.setdefault(key, []).append(record.value)

    async with anyio.create_task_group() as tg:
        for key in range(30):
            for value in range(4):
                tg.start_soon(put, f"k{key}", value)
    for key, values in results.items():
        stored = await store.get_idempotent(lease.execution_id, key)
        assert stored is not None
        assert values == [stored.value] * 4


async def test_acquiring_while_the_holder_releases_never_breaks(store: Store) -> None:
    for _ in range(25):
        lease = await started(store)
        outcome: list[object] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(take_lease, store, lease.execution_id, outcome)
            tg.start_soon(release_paused, store, lease)
        assert len(outcome) == 1
        assert outcome[0] == "held" or isinstance(outcome[0], Lease)


async def take_lease(store: Store, execution_id: str, outcome: list[object]) -> None:
    try:
        outcome.append(await store.acquire_lease(execution_id, owner="proc-b", lease_seconds=60))
    except LeaseHeld:
        outcome.append("held")


async def release_paused(store: Store, lease: Lease) -> None:
    await store.release_lease(lease, status="paused")


async def test_renewing_a_missing_execution_says_so(store: Store) -> None:
    ghost = Lease(execution_id="missing", owner=OWNER, epoch=1, expires_at=datetime.now(UTC))
    with pytest.raises(ExecutionNotFound):
        await store.renew_lease(ghost, lease_seconds=1)


async def test_negative_limits_are_refused(store: Store) -> None:
    with pytest.raises(ConfigurationError):
        await store.read_journal("x", limit=-1)
    with pytest.raises(ConfigurationError):
        await store.list_pending(limit=-1)
    with pytest.raises(ConfigurationError):
        await store.list_executions(limit=-1)


def test_text_no_store_can_keep_is_refused_by_the_models() -> None:
    for bad in ("nul\x00byte", "lone \ud800 surrogate"):
        with pytest.raises(ValueError, match=r"(?i)nul|unicode"):
            NewEntry(path=bad, label="x")
        with pytest.raises(ValueError, match=r"(?i)nul|unicode"):
            NewInterrupt(path="p", reason=bad)
        with pytest.raises(ValueError, match=r"(?i)nul|unicode"):
            NewExecution(execution_id=bad, runner="r", root_path="p")
