"""Model-based tests of the Store contract: hypothesis drives every store against a plain Python model.

A `RuleBasedStateMachine` interleaves several logical clients: starting
executions, appending under leases, taking leases over (which fences the old
holder), suspending, claiming (exactly once), releasing, and workers taking
ready executions. After every step the store must agree with the model: the
same sequence numbers, the same pending rows, the same statuses, the same
errors. Leases are long, so nothing expires on its own during a run.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from tether.stores import (
    AlreadyResumed,
    DuplicateInterrupt,
    ExecutionFinished,
    LeaseHeld,
    MemoryStore,
    NewEntry,
    NewExecution,
    NewInterrupt,
    NoPendingInterrupt,
    PostgresStore,
    SQLiteStore,
    StaleLease,
    Store,
)

IDS = ["e1", "e2"]
OWNERS = ["alice", "bob"]
PATHS = ["chain:x/node:a", "chain:x/node:b"]
LEASE = 3600.0


@dataclass
class Run:
    status: str = "running"
    next_seq: int = 1
    epoch: int = 1
    owner: str | None = None
    pending: dict[str, int] = field(default_factory=dict)  # path -> seq of its suspended entry
    decided: set[str] = field(default_factory=set)  # paths with a journaled decision
    ready: bool = False  # a worker may take it (a decision was claimed)


class StoreModel(RuleBasedStateMachine):
    portal: BlockingPortal
    make_store: Any

    def __init__(self) -> None:
        super().__init__()
        self.model: dict[str, Run] = {}
        self.leases: dict[tuple[str, str], Any] = {}  # (execution, owner) -> the last lease that owner got

    def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        async def run() -> Any:
            return await fn(*args, **kwargs)

        return self.portal.call(run)

    @initialize()
    def open_store(self) -> None:
        self.store: Store = self.make_store()
        self.call(self.store.setup)

    def teardown(self) -> None:
        self.call(self.store.aclose)

    # -- rules --------------------------------------------------------------------------

    @rule(execution=st.sampled_from(IDS), owner=st.sampled_from(OWNERS))
    def start(self, execution: str, owner: str) -> None:
        started = self.call(self.store.start_execution,
                            NewExecution(execution_id=execution, runner="x", root_path="chain:x"),
                            owner=owner, lease_seconds=LEASE)
        assert started.created == (execution not in self.model)
        if started.created:
            self.model[execution] = Run(owner=owner)
            self.leases[(execution, owner)] = started.lease

    @rule(execution=st.sampled_from(IDS), owner=st.sampled_from(OWNERS), count=st.integers(1, 3))
    def append(self, execution: str, owner: str, count: int) -> None:
        lease = self.leases.get((execution, owner))
        if lease is None:
            return
        run = self.model[execution]
        entries = [NewEntry(path="chain:x", label=f"e{k}") for k in range(count)]
        if run.owner == owner and run.epoch == lease.epoch:
            seqs = self.call(self.store.append, lease, entries)
            assert seqs == list(range(run.next_seq, run.next_seq + count))
            run.next_seq += count
        else:
            with pytest.raises(StaleLease):
                self.call(self.store.append, lease, entries)

    @rule(execution=st.sampled_from(IDS), owner=st.sampled_from(OWNERS))
    def acquire(self, execution: str, owner: str) -> None:
        run = self.model.get(execution)
        if run is None:
            return
        if run.status in ("completed", "cancelled"):
            with pytest.raises(ExecutionFinished):
                self.call(self.store.acquire_lease, execution, owner=owner, lease_seconds=LEASE)
            return
        if run.owner is not None and run.owner != owner:
            with pytest.raises(LeaseHeld):
                self.call(self.store.acquire_lease, execution, owner=owner, lease_seconds=LEASE)
            return
        lease = self.call(self.store.acquire_lease, execution, owner=owner, lease_seconds=LEASE)
        run.epoch += 1
        assert lease.epoch == run.epoch  # every acquisition fences the earlier epochs
        run.owner, run.status = owner, "running"
        self.leases[(execution, owner)] = lease

    @rule(execution=st.sampled_from(IDS), path=st.sampled_from(PATHS))
    def suspend(self, execution: str, path: str) -> None:
        run = self.model.get(execution)
        if run is None or run.owner is None:
            return
        lease = self.leases[(execution, run.owner)]
        interrupt = NewInterrupt(path=path, reason="approval")
        if path in run.pending:
            with pytest.raises(DuplicateInterrupt):
                self.call(self.store.suspend, lease, [NewEntry(path=path, label="s", kind="suspended")], interrupt)
            return
        row = self.call(self.store.suspend, lease, [NewEntry(path=path, label="s", kind="suspended")], interrupt)
        assert row.seq == run.next_seq
        run.next_seq += 1
        run.pending[path] = row.seq

    @rule(execution=st.sampled_from(IDS), status=st.sampled_from(["paused", "completed", "cancelled"]))
    def release(self, execution: str, status: str) -> None:
        run = self.model.get(execution)
        if run is None or run.owner is None:
            return
        self.call(self.store.release_lease, self.leases[(execution, run.owner)], status=status)
        run.owner, run.status = None, status
        if status != "paused":
            run.pending.clear()
        run.ready = False

    @rule(execution=st.sampled_from(IDS), path=st.sampled_from(PATHS), claimer=st.sampled_from([None, *OWNERS]))
    def claim(self, execution: str, path: str, claimer: str | None) -> None:
        run = self.model.get(execution)
        if run is None:
            return
        if path in run.pending and run.owner is not None and run.owner != claimer:
            with pytest.raises(LeaseHeld):  # it runs elsewhere: nothing is consumed
                self.call(self.store.claim, execution, {"approved": True}, path=path, owner=claimer)
            return
        if path in run.pending:
            entry = self.call(self.store.claim, execution, {"approved": True}, path=path, owner=claimer)
            assert entry.seq == run.next_seq
            run.next_seq += 1
            del run.pending[path]
            run.decided.add(path)
            run.ready = True
            if run.status == "paused":
                run.status = "decided"  # a decision waits for a process to carry it out
            return
        # A cancelled execution says so, whatever was decided before it was cancelled.
        late = path in run.decided and run.status != "cancelled"
        expected = AlreadyResumed if late else (ExecutionFinished, NoPendingInterrupt)
        with pytest.raises(expected):
            self.call(self.store.claim, execution, {"approved": True}, path=path, owner=claimer)

    @precondition(lambda self: bool(self.model))
    @rule(owner=st.sampled_from(OWNERS))
    def take_work(self, owner: str) -> None:
        ready = {e for e, r in self.model.items()
                 if r.ready and r.owner is None and r.status in ("paused", "decided")}
        leases = self.call(self.store.take_work, owner=owner, lease_seconds=LEASE, limit=10, roots=["chain:x"])
        assert {lease.execution_id for lease in leases} == ready
        for lease in leases:
            run = self.model[lease.execution_id]
            run.epoch += 1
            assert lease.epoch == run.epoch
            run.owner, run.status, run.ready = owner, "running", False
            self.leases[(lease.execution_id, owner)] = lease

    # -- what must always agree ---------------------------------------------------------

    @invariant()
    def agrees(self) -> None:
        if not hasattr(self, "store"):
            return
        for execution, run in self.model.items():
            stored = self.call(self.store.get_execution, execution)
            assert stored.status == run.status
            assert stored.lease_epoch == run.epoch
            assert stored.lease_owner == run.owner
            rows = self.call(self.store.list_pending, execution_id=execution)
            assert {r.agent_path: r.seq for r in rows} == run.pending


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def machine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[type[StoreModel]]:
    counter = iter(range(10**6))
    if request.param == "memory":
        def make() -> Store:
            return MemoryStore()
    elif request.param == "sqlite":
        def make() -> Store:
            return SQLiteStore(tmp_path / f"model-{next(counter)}.db", synchronous="NORMAL")
    else:
        dsn = request.getfixturevalue("postgres_dsn")
        prefix = request.getfixturevalue("pg_schema")

        def make() -> Store:
            return PostgresStore(dsn, schema=f"{prefix}_{next(counter)}")
    with start_blocking_portal("asyncio") as portal:
        yield type("Model", (StoreModel,), {"portal": portal, "make_store": staticmethod(make)})


def test_every_store_agrees_with_the_model(machine: type[StoreModel]) -> None:
    case = machine.TestCase()
    case.settings = settings(max_examples=60, stateful_step_count=40, deadline=None,
                             suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    case.runTest()
