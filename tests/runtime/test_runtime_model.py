"""Model-based tests of whole executions: hypothesis drives a chain against a plain Python model.

The flow is one approval chain, ``prepare -> approve -> pay -> finish``. ``approve``
pages a manager (``@idempotent``, before its ``interrupt()``: it runs again on
resume and must replay, not repeat) and waits for a decision; ``pay`` charges a
card (``@idempotent``) when the decision approves.

A `RuleBasedStateMachine` starts a few executions of it and interleaves, in
random order: running them again, resuming them with a decision from this
runtime or from another one (a second store on the same SQLite file, and a chain
built afresh), deciding them without running them, crashing them just after a
random journal write with `crash_at` (in a first run, a run, a resume or a
recovery), forgetting that a crashed run died (as when it ran on another
machine: its lease looks alive until it runs out), cancelling them (forced or
not), recovering them, and decisions that must change nothing: invalid ones,
ones for a path that asks nothing, ones for an id nobody started.

The model knows, per execution, how many of the flow's journal writes are
committed, the decision claimed, whether a crashed run still holds the lease,
whether that holder looks alive, and whether a recorded cancel waits for it to
stop. From
that it predicts each action's result or error, and after every step the store
must agree: the status, the lease, the recorded cancel, the pending rows, the
journal's labels entry by entry, the output, and each side effect's count (once,
under one idempotency key, and only once the flow got past it). It runs on the
memory and SQLite stores under asyncio and trio. Shrunk counterexamples become
the plain regression tests at the end of the file.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, precondition, rule
from pydantic import ValidationError
from tether.actors import Chain
from tether.runtime import Resume, RunResult, cancel, history, idempotency_key, idempotent, interrupt
from tether.runtime._core import hooks
from tether.runtime.testing import crash_at
from tether.stores import (
    AlreadyResumed,
    ExecutionFinished,
    ExecutionNotFound,
    LeaseHeld,
    MemoryStore,
    NoPendingInterrupt,
    SQLiteStore,
    Store,
)

# -- the flow --------------------------------------------------------------------------------

EFFECTS: Counter[tuple[str, str, str]] = Counter()
"""(execution, effect, idempotency key) -> how often the effect's body really ran."""


@idempotent
def page_manager(order: str) -> str:
    EFFECTS[order, "page", idempotency_key()] += 1
    return "paged"


@idempotent
def charge_card(order: str) -> str:
    EFFECTS[order, "charge", idempotency_key()] += 1
    return "charged"


async def prepare(state: dict[str, Any]) -> dict[str, Any]:
    return {"prepared": True}


def approve(state: dict[str, Any]) -> dict[str, Any]:
    page_manager(state["order"])  # runs again when the node is resumed: replayed, not repeated
    decision = interrupt("approval", {"order": state["order"]})
    return {"approved": decision.approved}


def pay(state: dict[str, Any]) -> dict[str, Any]:
    if state["approved"]:
        charge_card(state["order"])
    return {"paid": state["approved"]}


async def finish(state: dict[str, Any]) -> dict[str, Any]:
    return {"done": True}


def flow(store: Store) -> Chain:
    return Chain("flow", [prepare, approve, pay, finish], store=store)


PENDING_PATH = "chain:flow/node:approve"
WRITES: tuple[tuple[str, ...], ...] = (
    ("inbox",),
    ("node:prepare",),
    ("snapshot", "suspended"),  # approve asked: snapshot, suspension and pending row commit together
    ("node:approve",),
    ("node:pay",),
    ("node:finish", "msg:1", "completed"),  # the last node goes with the outcome, in one transaction
)
"""The labels of each journal write of the flow, in order: `crash_at(n)` dies just after one."""
ASKED = 3  # writes up to the suspension
PAID = 5  # writes up to pay's
VERDICTS = frozenset({"paused", "completed", "cancelled"})
"""Entries an outcome adds beside a run's last write: not boundaries `crash_at` counts."""


def expected_output(order: str, approved: bool) -> dict[str, Any]:
    return {"order": order, "prepared": True, "approved": approved, "paid": approved, "done": True}


def crash_label(write: tuple[str, ...]) -> str:
    """How `CrashPoint.boundaries` names a write: its last entry that is not a verdict."""
    return "chain:flow/" + [label for label in write if label not in VERDICTS][-1]


# -- the model -------------------------------------------------------------------------------


@dataclass
class Run:
    """What one execution should look like in the store."""

    status: str = "running"
    written: int = 0  # how many of WRITES are committed
    decision: bool | None = None  # the claimed decision
    pending: bool = False
    dead: bool = False  # a crashed run still holds the lease
    alive: bool = False  # ... and nobody here knows it died: its lease is waited out, or forced
    cancelling: bool = False  # a cancel is recorded, for its holder to carry out
    journal: list[str] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.status in ("completed", "cancelled")

    def writes(self) -> list[tuple[str, ...]]:
        """The journal writes the next drive (a run, a resume or a recovery) makes."""
        if self.cancelling:
            return []  # it only ends: the verdict is not a boundary
        if self.decision is None:
            return list(WRITES[self.written:ASKED])
        return list(WRITES[self.written:])

    def drive(self, crash: int | None = None) -> None:
        """Drive it as far as it goes, or until the process dies just after write ``crash``.

        Never one whose holder looks alive: that drive is refused (`LeaseHeld`).
        """
        if self.cancelling:
            self.end("cancelled")
            return
        for n, write in enumerate(self.writes(), 1):
            self.journal.extend(write)
            self.written += 1
            if n == crash:
                break
        if self.written == len(WRITES):
            self.status, self.dead = "completed", False  # a crash there too: its write held the outcome
            return
        self.pending = self.written >= ASKED and self.decision is None
        if crash is not None:
            self.status, self.dead = "running", True  # the dead run keeps its lease, as after a SIGKILL
        else:
            self.journal.append("paused")
            self.status, self.dead = "paused", False

    def claim(self, approved: bool) -> None:
        self.journal.append("resumed")
        self.decision, self.pending = approved, False

    def end(self, status: str) -> None:
        self.journal.append(status)
        self.status, self.pending, self.dead, self.alive, self.cancelling = status, False, False, False, False

    def refusal(self) -> type[Exception] | None:
        """The error a decision for it gets, or None when it is claimed."""
        if self.status == "cancelled" or self.cancelling:  # a recorded cancel: it will not continue
            return ExecutionFinished
        if self.pending:
            return LeaseHeld if self.alive else None  # the claim is checked before the lease
        if self.decision is not None:
            return AlreadyResumed  # the second resume of one interrupt
        return NoPendingInterrupt  # it crashed before it asked


where = st.sampled_from(["here", "there"])  # this runtime, or another one on the same database
approvals = st.booleans()


class ExecutionModel(RuleBasedStateMachine):
    portal: BlockingPortal
    open_stores: Callable[[], tuple[Store, Store]]
    examples = itertools.count()

    executions = Bundle("executions")

    def __init__(self) -> None:
        super().__init__()
        self.model: dict[str, Run] = {}
        EFFECTS.clear()
        # Ids of their own per example: a crash an example left unrecovered (the testing kit
        # hands its lease to the next drive of that id in this process) never reaches another.
        self.prefix = f"x{next(self.examples)}-"

    def call(self, fn: Callable[[], Any]) -> Any:
        return self.portal.call(fn)

    def eid(self, name: str) -> str:
        return self.prefix + name

    @initialize()
    def open(self) -> None:
        here, there = self.open_stores()
        self.stores = {"here": here, "there": there}
        self.call(lambda: self.each_store("setup"))
        self.chains = {key: flow(store) for key, store in self.stores.items()}

    def teardown(self) -> None:
        if hasattr(self, "stores"):
            self.call(lambda: self.each_store("aclose"))

    async def each_store(self, method: str) -> None:
        for store in {id(store): store for store in self.stores.values()}.values():
            await getattr(store, method)()

    # -- helpers ----------------------------------------------------------------------------

    def perform(self, name: str, where: str, action: str, approved: bool = True,
                force: bool = False) -> Callable[[], Any]:
        """One action, as a coroutine function for the portal (`crash` wraps it first)."""
        chain, execution_id = self.chains[where], self.eid(name)
        if action == "run":
            return lambda: chain.run({"order": execution_id}, execution_id=execution_id)
        if action == "resume":
            decision = Resume(approved=approved, metadata={"approver": where})
            return lambda: chain.resume(execution_id, decision)
        if action == "decide":
            return lambda: chain.decide(execution_id, Resume(approved=approved))
        if action == "cancel":
            store = self.stores[where]
            # wait=0: a holder that looks alive (a crashed run's, here) is not waited out.
            return lambda: cancel(store, execution_id, reason="model", wait=0, force=force)
        assert action == "recover"
        return lambda: chain.resume(execution_id)

    def check_result(self, name: str, result: RunResult) -> None:
        run = self.model[name]
        assert result.status == run.status
        if run.status == "paused":
            assert result.pending_interrupt is not None
            assert result.pending_interrupt.agent_path == PENDING_PATH
        if run.status == "completed":
            assert run.decision is not None
            assert result.output == expected_output(self.eid(name), run.decision)

    def held(self, name: str, where: str, action: str) -> bool:
        """Whether ``action`` drives a run whose dead holder looks alive: it is refused, `LeaseHeld`."""
        if not self.model[name].alive:
            return False
        with pytest.raises(LeaseHeld):
            self.call(self.perform(name, where, action))
        return True

    def planned(self, run: Run, action: str) -> list[tuple[str, ...]]:
        """The journal writes ``action`` would make (none when it is refused or only returns)."""
        if action == "resume":
            return list(WRITES[run.written:]) if run.refusal() is None and not run.cancelling else []
        if action == "run" and run.status == "paused":
            return []  # run() returns a paused execution as it is; a recovery takes it up
        return [] if run.finished else run.writes()

    def crash_in(self, name: str, where: str, action: str, approved: bool, k: int) -> None:
        """Do ``action`` and die just after one of its journal writes (which: from ``k``)."""
        run = self.model.setdefault(name, Run())
        writes = self.planned(run, action)
        if not writes or run.alive:
            return  # nothing to crash at (or its lease held): the other rules cover what it would do
        at = 1 + k % len(writes)
        perform = self.perform(name, where, action, approved)

        async def crashing() -> Any:
            async with crash_at(at) as point:
                await perform()
            return point

        point = self.call(crashing)
        assert point.happened
        assert point.boundaries == [crash_label(write) for write in writes[:at]]
        if action == "resume":
            run.claim(approved)
        run.drive(crash=at)

    # -- rules ------------------------------------------------------------------------------

    @precondition(lambda self: len(self.model) < 3)
    @rule(target=executions, where=where, crash=st.none() | st.integers(0, 5))
    def start(self, where: str, crash: int | None) -> str:
        """A new execution: run to its pause, or crashed in its first run."""
        name = f"e{len(self.model) + 1}"
        if crash is not None:
            self.crash_in(name, where, "run", True, crash)
        else:
            result = self.call(self.perform(name, where, "run"))
            self.model[name] = run = Run()
            run.drive()
            self.check_result(name, result)
        return name

    @rule(name=executions, where=where)
    def run_again(self, name: str, where: str) -> None:
        """The id is an idempotency key: a crashed or decided run is continued, any other returned as it is."""
        run = self.model[name]
        if self.held(name, where, "run"):
            return
        result = self.call(self.perform(name, where, "run"))
        if run.status in ("running", "decided"):
            run.drive()
        self.check_result(name, result)

    @rule(name=executions, where=where, approved=approvals)
    def resume(self, name: str, where: str, approved: bool) -> None:
        run = self.model[name]
        refused = run.refusal()
        if refused is not None:
            with pytest.raises(refused):
                self.call(self.perform(name, where, "resume", approved))
            return
        result = self.call(self.perform(name, where, "resume", approved))
        run.claim(approved)
        run.drive()
        self.check_result(name, result)

    @rule(name=executions, where=where, approved=approvals)
    def decide(self, name: str, where: str, approved: bool) -> None:
        """A decision recorded with the store alone, for whoever takes the run up next."""
        run = self.model[name]
        refused = run.refusal()
        if refused is not None:
            with pytest.raises(refused):
                self.call(self.perform(name, where, "decide", approved))
            return
        self.call(self.perform(name, where, "decide", approved))
        run.claim(approved)
        if run.status == "paused":
            run.status = "decided"  # a crashed one stays running, its dead lease held

    @rule(name=executions, where=where)
    def recover(self, name: str, where: str) -> None:
        run = self.model[name]
        if self.held(name, where, "recover"):
            return
        result = self.call(self.perform(name, where, "recover"))
        if not run.finished:
            run.drive()  # a paused one too: it is taken up and parks again, journaling its pause once more
        self.check_result(name, result)

    @rule(name=executions, where=where, action=st.sampled_from(["run", "resume", "recover"]),
          approved=approvals, k=st.integers(0, 5))
    def crash(self, name: str, where: str, action: str, approved: bool, k: int) -> None:
        self.crash_in(name, where, action, approved, k)

    @rule(name=executions)
    def lose_track(self, name: str) -> None:
        """Forget that a crashed run died, as if it ran on another machine: its lease looks alive."""
        run = self.model[name]
        if not run.dead or run.alive:
            return
        assert hooks.installed().heirs.pop(self.eid(name), None) is not None  # the kit knew it died
        run.alive = True

    @rule(name=executions, where=where, force=st.booleans())
    def cancel(self, name: str, where: str, force: bool) -> None:
        run = self.model[name]
        result = self.call(self.perform(name, where, "cancel", force=force))
        if run.finished:
            pass  # the verdict it reached first stands
        elif run.alive and not force:
            run.cancelling = True  # recorded, for its holder (or whoever outlives its lease) to carry out
        else:
            if run.alive:
                run.journal.append("takeover")  # forced past a live-looking lease: the journal says so
            run.end("cancelled")  # a run known to be dead is taken over at once
        assert result.status == run.status

    @rule(name=executions, where=where, via=st.sampled_from(["resume", "decide"]),
          value=st.sampled_from([{}, {"approved": "maybe"}, {"metadata": {"note": "no verdict"}}]))
    def invalid_decision(self, name: str, where: str, via: str, value: dict[str, Any]) -> None:
        """Checked before the claim: refused, and nothing changes (the invariant sees to that)."""
        chain, execution_id = self.chains[where], self.eid(name)
        send = chain.resume if via == "resume" else chain.decide
        with pytest.raises(ValidationError):
            self.call(lambda: send(execution_id, value))

    @rule(name=executions, where=where)
    def decision_for_another_path(self, name: str, where: str) -> None:
        """A decision for a path that asks nothing: refused, and the pending row stays."""
        run = self.model[name]
        if not run.pending or run.status == "cancelled":
            return
        chain, execution_id = self.chains[where], self.eid(name)
        with pytest.raises(ExecutionFinished if run.cancelling else NoPendingInterrupt):
            self.call(lambda: chain.resume(execution_id, Resume(approved=True), path="chain:flow/node:pay"))

    @rule(where=where, action=st.sampled_from(["resume", "decide", "recover", "cancel"]))
    def unknown_id(self, where: str, action: str) -> None:
        """An id nobody started: refused, and nothing is created."""
        name = "unknown"
        with pytest.raises(ExecutionNotFound):
            self.call(self.perform(name, where, action))

    # -- what must always agree -------------------------------------------------------------

    @invariant()
    def agrees(self) -> None:
        if not hasattr(self, "stores"):
            return
        store, names = self.stores["here"], list(self.model)

        async def observe() -> list[Any]:
            seen = []
            for name in names:
                execution_id = self.eid(name)
                execution = await store.get_execution(execution_id)
                pending = await store.list_pending(execution_id=execution_id)
                journal = await history(store, execution_id)
                seen.append((execution, [p.agent_path for p in pending], [b.label for b in journal]))
            return seen

        for name, (execution, pending, labels) in zip(names, self.call(observe), strict=True):
            run = self.model[name]
            assert execution.status == run.status
            assert (execution.lease_owner is not None) == run.dead
            if not run.finished:
                assert (execution.cancel is not None) == run.cancelling
            assert pending == ([PENDING_PATH] if run.pending else [])
            assert labels == run.journal
            done = [label for label in labels if label.startswith("node:")]
            assert len(done) == len(set(done))  # no node journaled twice, whatever crashed
            if run.status == "completed":
                assert run.decision is not None
                assert execution.result == expected_output(self.eid(name), run.decision)
            self.effects_agree(name, run)
        started = {self.eid(name) for name in names}
        assert {order for order, _, _ in EFFECTS} <= started

    def effects_agree(self, name: str, run: Run) -> None:
        execution_id = self.eid(name)
        due = {"page": run.written >= ASKED, "charge": bool(run.decision) and run.written >= PAID}
        for effect, happened in due.items():
            runs = [n for (order, what, _), n in EFFECTS.items() if order == execution_id and what == effect]
            assert runs == ([1] if happened else []), (effect, runs)  # once, under one key, once due


# -- the cases -------------------------------------------------------------------------------

CASES = [pytest.param((backend, kind), id=f"{backend}-{kind}")
         for backend in ("asyncio", "trio") for kind in ("memory", "sqlite")]


@pytest.fixture(params=CASES)
def machine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[type[ExecutionModel]]:
    backend, kind = request.param
    files = (tmp_path / f"model-{n}.db" for n in itertools.count())

    def open_stores() -> tuple[Store, Store]:
        if kind == "memory":
            store = MemoryStore()
            return store, store  # the other runtime: the same store, a chain built afresh
        path = next(files)
        return SQLiteStore(path, synchronous="NORMAL"), SQLiteStore(path, synchronous="NORMAL")

    # A store belongs to the event loop that opened it: every call goes through this portal.
    with start_blocking_portal(backend) as portal:
        yield type("Model", (ExecutionModel,), {"portal": portal, "open_stores": staticmethod(open_stores)})


def run_machine(machine: type[ExecutionModel], examples: int, steps: int) -> None:
    case = machine.TestCase()
    case.settings = settings(max_examples=examples, stateful_step_count=steps, deadline=None,
                             suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    case.runTest()


def test_executions_agree_with_the_model(machine: type[ExecutionModel]) -> None:
    run_machine(machine, examples=60, steps=30)


@pytest.mark.slow
def test_executions_agree_with_the_model_at_length(machine: type[ExecutionModel]) -> None:
    run_machine(machine, examples=500, steps=50)


# -- regressions the machine found -----------------------------------------------------------


@pytest.fixture(params=["memory", "sqlite"])
async def model_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    store = MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "tether.db")
    async with store:
        yield store


@pytest.mark.parametrize(("at", "refused", "value", "path"), [
    pytest.param(1, ValidationError, {}, None, id="invalid"),
    pytest.param(2, NoPendingInterrupt, Resume(approved=True), None, id="not-asked-yet"),
    pytest.param(3, NoPendingInterrupt, Resume(approved=True), "chain:flow/node:pay", id="another-path"),
])
async def test_a_refused_decision_leaves_a_crashed_run_to_the_next_recovery(
    model_store: Store, at: int, refused: type[Exception], value: Any, path: str | None
) -> None:
    # Shrunk: executions_0 = start(crash=0) [dies after its inbox]; invalid_decision(executions_0,
    # value={}, via='resume'); recover(executions_0) -> LeaseHeld. The refused resume had taken
    # the dead run's lease, which the testing kit hands to the first drive only, so nothing
    # recovered the run before the lease expired (after a real crash, the next drive would).
    chain = flow(model_store)
    async with crash_at(at):
        await chain.run({"order": "r-1"}, execution_id="r-1")
    with pytest.raises(refused):
        await chain.resume("r-1", value, path=path)
    result = await chain.resume("r-1")
    assert result.status == "paused"
    assert result.pending_interrupt is not None and result.pending_interrupt.agent_path == PENDING_PATH


async def test_a_second_decision_leaves_a_run_that_crashed_after_the_first_to_its_recovery(model_store: Store) -> None:
    chain = flow(model_store)
    await chain.run({"order": "r-2"}, execution_id="r-2")
    async with crash_at(1):  # just after node:approve, the first write after the claim
        await chain.resume("r-2", Resume(approved=True))
    with pytest.raises(AlreadyResumed):
        await chain.resume("r-2", Resume(approved=False))
    result = await chain.resume("r-2")
    assert result.status == "completed" and result.output == expected_output("r-2", True)


async def test_a_decision_after_a_recorded_cancel_is_refused(model_store: Store) -> None:
    # Executions.cancel: "a decision claimed before the cancel is carried out by nobody; one
    # claimed after it is refused (ExecutionFinished)". Here the lease's holder is a crashed
    # run nobody here knows is dead (it ran on another machine), so the cancel waits for it.
    chain = flow(model_store)
    async with crash_at("suspended"):
        await chain.run({"order": "r-3"}, execution_id="r-3")
    hooks.installed().heirs.pop("r-3")  # forget that it died: its lease looks alive
    assert (await cancel(model_store, "r-3", wait=0)).status == "running"
    with pytest.raises(ExecutionFinished, match="is cancelled"):
        await chain.decide("r-3", Resume(approved=True))
    with pytest.raises(ExecutionFinished, match="is cancelled"):
        await chain.resume("r-3", Resume(approved=True))
    assert [p.agent_path for p in await model_store.list_pending(execution_id="r-3")] == ["chain:flow/node:approve"]
    assert (await cancel(model_store, "r-3", wait=0, force=True)).status == "cancelled"
    assert await model_store.list_pending(execution_id="r-3") == []
    assert ("r-3", "charge") not in {(e, name) for e, name, _ in EFFECTS}
