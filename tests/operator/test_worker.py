"""ExecutionWorker in process, on every store and both backends: detached starts, decisions recorded
elsewhere, approval deadlines, durable timers, and what a worker must not take."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from tether.actors import Chain
from tether.runtime import AlreadyResumed, ExecutionWorker, Resume, RunResult, interrupt, sleep, sleep_until
from tether.stores import ConfigurationError, SQLiteStore, Store, UsageError

RUNS: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _clean() -> None:
    RUNS.clear()


def counted(name: str) -> Any:
    def node(state: dict[str, Any]) -> dict[str, Any]:
        RUNS[name] += 1
        return {name: True}

    node.__name__ = name
    return node


def approve(state: dict[str, Any]) -> dict[str, Any]:
    RUNS["approve"] += 1
    decision = interrupt("manager_approval", {"amount": 5}, timeout=timedelta(seconds=state.get("timeout", 3600)),
                         default=Resume(approved=False, metadata={"by": "policy"}))
    return {"approved": decision.approved}


async def nap(state: dict[str, Any]) -> dict[str, Any]:
    RUNS["nap"] += 1
    await sleep(state.get("nap", 0.2))
    return {"rested": True}


async def serve_until(worker: ExecutionWorker, done: anyio.Event) -> None:
    """Run the worker until ``done`` is set (by its on_result), bounded."""
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker.serve)
            await done.wait()
            worker.stop()


def finisher(execution_id: str, status: str = "completed") -> tuple[anyio.Event, Any]:
    done = anyio.Event()

    def on_result(result: RunResult) -> None:
        if result.execution_id == execution_id and result.status == status:
            done.set()

    return done, on_result


async def test_a_detached_start_runs_on_a_worker(store: Store) -> None:
    chain = Chain("line", [counted("a"), counted("b")], store=store)
    queued = await chain.start({}, execution_id="d-1")
    assert queued.status == "queued"
    assert RUNS == {}
    done, on_result = finisher("d-1")
    async with ExecutionWorker(store, [chain], poll_interval=0.05, on_result=on_result) as worker:
        await serve_until(worker, done)
    result = await store.get_execution("d-1")
    assert result is not None
    assert result.status == "completed"
    assert RUNS == {"a": 1, "b": 1}


async def test_a_decision_recorded_anywhere_is_carried_out_by_a_worker(store: Store) -> None:
    chain = Chain("approval", [counted("validate"), approve, counted("charge")], store=store)
    paused = await chain.run({}, execution_id="d-2")
    assert paused.status == "paused"
    await chain.decide("d-2", Resume(approved=True))  # records only
    with pytest.raises(AlreadyResumed):
        await chain.decide("d-2", Resume(approved=False))
    assert RUNS == {"validate": 1, "approve": 1}
    done, on_result = finisher("d-2")
    async with ExecutionWorker(store, [chain], poll_interval=0.05, on_result=on_result) as worker:
        await serve_until(worker, done)
    execution = await store.get_execution("d-2")
    assert execution is not None
    assert execution.result == {"validate": True, "approved": True, "charge": True}
    assert RUNS == {"validate": 1, "approve": 2, "charge": 1}


async def test_an_approval_deadline_is_decided_by_a_worker(store: Store) -> None:
    chain = Chain("deadline", [approve, counted("charge")], store=store)
    paused = await chain.run({"timeout": 0.2}, execution_id="d-3")
    assert paused.pending_interrupt is not None
    assert paused.pending_interrupt.deadline is not None
    assert paused.pending_interrupt.default == {"approved": False, "metadata": {"by": "policy"}}
    done, on_result = finisher("d-3")
    async with ExecutionWorker(store, [chain], poll_interval=0.05, on_result=on_result) as worker:
        await serve_until(worker, done)
    execution = await store.get_execution("d-3")
    assert execution is not None
    assert execution.result == {"timeout": 0.2, "approved": False, "charge": True}
    [decision] = [e for e in await store.read_journal("d-3") if e.kind == "resumed"]
    assert decision.payload["by"] == "deadline"  # type: ignore[index, call-overload]
    with pytest.raises(AlreadyResumed):  # a person arriving late is told, as after any decision
        await chain.decide("d-3", Resume(approved=True))


async def test_a_durable_sleep_parks_the_run_until_it_is_due(store: Store) -> None:
    chain = Chain("timer", [counted("before"), nap, counted("after")], store=store)
    parked = await chain.run({"nap": 0.3}, execution_id="d-4")
    assert parked.status == "paused"
    assert parked.pending == []  # nothing to decide: a timer
    execution = await store.get_execution("d-4")
    assert execution is not None
    assert execution.wake_at is not None
    assert execution.wake_at > datetime.now(UTC)
    done, on_result = finisher("d-4")
    async with ExecutionWorker(store, [chain], poll_interval=0.05, on_result=on_result) as worker:
        await serve_until(worker, done)
    execution = await store.get_execution("d-4")
    assert execution is not None
    assert execution.status == "completed"
    assert execution.updated_at >= execution.created_at + timedelta(seconds=0.3)
    assert RUNS == {"before": 1, "nap": 2, "after": 1}


async def test_a_worker_takes_only_its_runners_executions(store: Store) -> None:
    mine = Chain("mine", [counted("m")], store=store)
    theirs = Chain("theirs", [counted("t")], store=store)
    await theirs.start({}, execution_id="d-5")
    await mine.start({}, execution_id="d-6")
    async with ExecutionWorker(store, [mine], poll_interval=0.05) as worker:
        with anyio.fail_after(30):
            await worker.serve(until_idle=True)
    assert RUNS == {"m": 1}
    other = await store.get_execution("d-5")
    assert other is not None
    assert other.status == "queued"


async def test_timers_and_deadlines_refuse_misuse(store: Store) -> None:
    with pytest.raises(UsageError, match="durable timers"):
        await sleep(1)
    with pytest.raises(UsageError, match="aware datetime"):
        await sleep_until(datetime(2030, 1, 1))

    def no_default(state: dict[str, Any]) -> dict[str, Any]:
        interrupt("x", timeout=timedelta(seconds=1))
        return {}

    result = await Chain("bad", [no_default], store=store).run({}, execution_id="d-7")
    assert result.status == "failed"
    assert result.error is not None
    assert "needs default=" in result.error


def test_one_worker_per_sqlite_file(tmp_path: Path) -> None:
    async def main() -> None:
        store = SQLiteStore(tmp_path / "w.db")
        chain = Chain("c", [counted("a")], store=store)
        async with store, ExecutionWorker(store, [chain]):
            with pytest.raises(ConfigurationError, match="one worker process at a time"):
                async with ExecutionWorker(SQLiteStore(tmp_path / "w.db"), [chain]):
                    pass
        async with ExecutionWorker(store, [chain]):  # the first one let go
            pass

    anyio.run(main)


async def test_concurrent_takers_never_share_an_execution(store: Store) -> None:
    chain = Chain("many", [counted("a")], store=store)
    for n in range(30):
        await chain.start({}, execution_id=f"m-{n}")
    taken: list[str] = []

    async def take(owner: str) -> None:
        for _ in range(10):
            leases = await store.take_work(owner=owner, lease_seconds=60, limit=2, roots=[chain.root_path])
            taken.extend(lease.execution_id for lease in leases)

    async with anyio.create_task_group() as tg:
        for k in range(4):
            tg.start_soon(take, f"w{k}")
    assert sorted(taken) == sorted(f"m-{n}" for n in range(30))


async def test_a_long_run_keeps_its_lease(db_store: Store) -> None:
    async def slow(state: dict[str, Any]) -> dict[str, Any]:
        await anyio.sleep(1.0)  # the work itself: over three lease lengths
        # Another worker looking now finds the lease renewed, not expired.
        stolen = await db_store.take_work(owner="thief", lease_seconds=60, limit=10, roots=["chain:slow"])
        return {"stolen": len(stolen)}

    chain = Chain("slow", [slow], store=db_store, lease_seconds=0.3)
    result = await chain.run({}, execution_id="d-8")
    assert result.status == "completed"
    assert result.output == {"stolen": 0}


def versioned(version: str) -> Chain:
    """Version 2 renamed approve; each version's charge says which it is."""
    chain = Chain("refund", version=version, store=None)
    chain.add_node(counted("validate"))
    chain.add_node(approve, "approve" if version == "1" else "sign_off")
    chain.add_node(counted(f"charge_v{version}"), "charge")
    chain.add_edge("validate", "approve" if version == "1" else "sign_off")
    chain.add_edge("approve" if version == "1" else "sign_off", "charge")
    return chain


async def test_a_worker_with_two_versions_runs_each_run_on_its_own(store: Store) -> None:
    v1, v2 = versioned("1"), versioned("2")
    v1.store = v2.store = store
    assert (await v1.run({}, execution_id="old")).status == "paused"
    await v1.decide("old", Resume(approved=True))
    assert (await v2.start({}, execution_id="new")).status == "queued"  # a detached start, on v2
    finished: set[str] = set()
    done = anyio.Event()

    def on_result(result: RunResult) -> None:
        finished.add(f"{result.execution_id}:{result.status}")
        if {"old:completed", "new:paused"} <= finished:
            done.set()

    async with ExecutionWorker(store, [v2, v1], poll_interval=0.05, on_result=on_result) as worker:
        await serve_until(worker, done)
    assert RUNS["charge_v1"] == 1 and RUNS["charge_v2"] == 0  # the old run finished on its own version
    [pending] = await store.list_pending(execution_id="new")
    assert pending.agent_path == "chain:refund/node:sign_off"  # the new one started on v2


async def test_a_worker_without_a_runs_version_does_not_take_it(store: Store) -> None:
    v1, v2 = versioned("1"), versioned("2")
    v1.store = v2.store = store
    assert (await v1.run({}, execution_id="old")).status == "paused"
    await v1.decide("old", Resume(approved=True))
    assert (await v2.start({}, execution_id="new")).status == "queued"
    async with ExecutionWorker(store, [v2], poll_interval=0.05) as worker:
        with anyio.fail_after(30):
            await worker.serve(until_idle=True)
    old = await store.get_execution("old")
    assert old is not None and (old.status, old.lease_owner) == ("decided", None)  # left for a v1 worker
    assert RUNS["charge_v1"] == 0 and RUNS["charge_v2"] == 0
    [pending] = await store.list_pending(execution_id="new")  # its own run it took
    assert pending.agent_path == "chain:refund/node:sign_off"
    async with ExecutionWorker(store, [v1], poll_interval=0.05) as worker:
        with anyio.fail_after(30):
            await worker.serve(until_idle=True)
    assert RUNS["charge_v1"] == 1
