"""Executions: interrupt deep in the tree, resume from anywhere, exactly once."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from pydantic import BaseModel, ValidationError
from tether.runtime import (
    Actor,
    AlreadyResumed,
    Resume,
    Runtime,
    Start,
    Suspension,
    call_scope,
    idempotent,
    interrupt,
)
from tether.stores import ExecutionFinished, LeaseHeld, Store, UsageError

EFFECTS: list[str] = []
PATH = "supervisor:planner/worker:auditor/tool:approve_refund"


class Audit(BaseModel):
    amount: int
    approvals: list[str] = ["approve_refund"]


class Trail(BaseModel):
    audits: int = 0


@idempotent
async def notify(text: str) -> str:
    EFFECTS.append(text)
    return text


class Auditor(Actor[Trail]):
    kind = "worker"
    messages = (Audit,)

    async def receive(self, message: Audit) -> Any:
        # Runs again from here on resume: the @idempotent call absorbs the repeat.
        await notify(f"audit {message.amount}")
        decisions = {}
        for tool in message.approvals:
            with call_scope(f"tool:{tool}"):
                if message.amount > 10_000:
                    decision = interrupt("manager_approval", {"amount": message.amount, "tool": tool})
                    decisions[tool] = decision.approved
                else:
                    decisions[tool] = True
        self.state.audits += 1
        return decisions


class Plan(BaseModel):
    delegated: int = 0


class Planner(Actor[Plan]):
    kind = "supervisor"

    async def receive(self, message: Start) -> Any:
        request = message.input
        assert isinstance(request, dict)
        auditor = await self.context.spawn(Auditor, "auditor", durable=True)
        verdict = await auditor.ask(Audit(**request))
        self.state.delegated += 1
        self.context.finish({"amount": request["amount"], "verdict": verdict})


class ParallelPlanner(Actor[Plan]):
    kind = "supervisor"

    async def receive(self, message: Start) -> Any:
        verdicts: dict[str, Any] = {}
        failures: list[BaseException] = []

        async def delegate(role: str) -> None:
            # Let every branch settle before re-raising: a sibling cancelled half-way
            # would only suspend one resume later.
            try:
                ref = await self.context.spawn(Auditor, role, durable=True)
                verdicts[role] = await ref.ask(Audit(amount=50_000))
            except (Exception, Suspension) as exc:
                failures.append(exc)

        async with anyio.create_task_group() as tg:
            for role in ("east", "west"):
                tg.start_soon(delegate, role)
        if failures:
            raise BaseExceptionGroup("delegations", failures)
        self.context.finish(verdicts)


@pytest.fixture(autouse=True)
def _clean() -> None:
    EFFECTS.clear()


async def test_small_amounts_complete_without_a_pause(store: Store) -> None:
    async with Runtime(store) as rt:
        result = await rt.run(Planner, {"amount": 500}, execution_id="small", name="planner")
    assert result.status == "completed"
    assert result.output == {"amount": 500, "verdict": {"approve_refund": True}}


async def test_interrupt_in_a_grandchild_pauses_the_tree_with_one_pending_row(store: Store) -> None:
    async with Runtime(store) as rt:
        paused = await rt.run(Planner, {"amount": 50_000}, execution_id="job-42", name="planner")
    assert paused.status == "paused"
    assert paused.pending_interrupt is not None
    assert paused.pending_interrupt.agent_path == PATH
    assert paused.pending_interrupt.context == {"amount": 50_000, "tool": "approve_refund"}
    assert await store.count_pending() == 1

    # Any process with the same code and store resumes it; here, a fresh runtime.
    async with Runtime(store) as rt:
        done = await rt.resume(Planner, "job-42", Resume(approved=True, metadata={"approver": "alice"}))
        assert done.status == "completed"
        assert done.output == {"amount": 50_000, "verdict": {"approve_refund": True}}
        with pytest.raises(AlreadyResumed):
            await rt.resume(Planner, "job-42", Resume(approved=False), path=PATH)
        again = await rt.run(Planner, {"amount": 1}, execution_id="job-42", name="planner")
    assert again == done  # the id is an idempotency key
    # The audit ran twice (before and after the pause); its side effect once.
    assert EFFECTS == ["audit 50000"]


async def test_a_second_different_approval_pauses_again(store: Store) -> None:
    request = {"amount": 20_000, "approvals": ["approve_refund", "approve_payout"]}
    async with Runtime(store) as rt:
        first = await rt.run(Planner, request, execution_id="two", name="planner")
        assert first.pending_interrupt is not None
        assert first.pending_interrupt.agent_path.endswith("tool:approve_refund")
        second = await rt.resume(Planner, "two", Resume(approved=True))
        # Not approved automatically with the first decision (fastaiagent 1.94's bug).
        assert second.status == "paused"
        assert second.pending_interrupt is not None
        assert second.pending_interrupt.agent_path.endswith("tool:approve_payout")
        done = await rt.resume(Planner, "two", Resume(approved=False))
    assert done.status == "completed"
    assert done.output == {"amount": 20_000, "verdict": {"approve_refund": True, "approve_payout": False}}


async def test_a_malformed_decision_is_refused_before_the_claim(store: Store) -> None:
    async with Runtime(store) as rt:
        await rt.run(Planner, {"amount": 50_000}, execution_id="bad", name="planner")
        with pytest.raises(ValidationError):
            await rt.resume(Planner, "bad", {"approved": "perhaps"})
        assert await store.count_pending(execution_id="bad") == 1
        done = await rt.resume(Planner, "bad", {"approved": True, "amount": 120})
    assert done.status == "completed"


async def test_a_resumer_that_died_after_its_claim_is_finished_by_recovery(store: Store) -> None:
    async with Runtime(store) as rt:
        await rt.run(Planner, {"amount": 50_000}, execution_id="orphan", name="planner")
    # The claim is the resumer's one atomic step: a process that dies right after it
    # leaves the decision in the journal, and a plain recovery carries it out.
    await store.claim("orphan", Resume(approved=False).model_dump(mode="json"), path=PATH)
    async with Runtime(store) as rt:
        done = await rt.resume(Planner, "orphan")
    assert done.status == "completed"
    assert done.output == {"amount": 50_000, "verdict": {"approve_refund": False}}


async def test_two_recoverers_at_once_one_runs(store: Store) -> None:
    async with Runtime(store) as rt:
        await rt.run(Planner, {"amount": 50_000}, execution_id="race", name="planner")
    await store.claim("race", Resume(approved=True).model_dump(mode="json"), path=PATH)
    outcomes: list[str] = []

    async def recover(rt: Runtime) -> None:
        try:
            outcomes.append((await rt.resume(Planner, "race")).status)
        except LeaseHeld:
            outcomes.append("lease held")

    async with Runtime(store) as a, Runtime(store) as b, anyio.create_task_group() as tg:
        tg.start_soon(recover, a)
        tg.start_soon(recover, b)
    assert sorted(outcomes) in (["completed", "lease held"], ["completed", "completed"])
    execution = await store.get_execution("race")
    assert execution is not None
    assert execution.status == "completed"
    assert execution.result == {"amount": 50_000, "verdict": {"approve_refund": True}}


async def test_parallel_suspensions_are_two_pending_rows(store: Store) -> None:
    async with Runtime(store) as rt:
        paused = await rt.run(ParallelPlanner, None, execution_id="par", name="planner")
        assert paused.status == "paused"
        paths = sorted(p.agent_path for p in paused.pending)
        assert paths == ["supervisor:planner/worker:east/tool:approve_refund",
                         "supervisor:planner/worker:west/tool:approve_refund"]
        half = await rt.resume(ParallelPlanner, "par", Resume(approved=True), path=paths[0])
        assert half.status == "paused"
        assert [p.agent_path for p in half.pending] == [paths[1]]
        done = await rt.resume(ParallelPlanner, "par", Resume(approved=False), path=paths[1])
    assert done.status == "completed"
    assert done.output == {"east": {"approve_refund": True}, "west": {"approve_refund": False}}


async def test_cancel_a_paused_execution(store: Store) -> None:
    async with Runtime(store) as rt:
        await rt.run(Planner, {"amount": 50_000}, execution_id="stop", name="planner")
        cancelled = await rt.cancel("stop")
        assert cancelled.status == "cancelled"
        assert await store.count_pending() == 0
        with pytest.raises(ExecutionFinished):
            await rt.resume(Planner, "stop", Resume(approved=True))


async def test_a_root_that_raises_fails_the_execution(store: Store) -> None:
    class Broken(Actor[Plan]):
        kind = "supervisor"

        async def receive(self, message: Start) -> Any:
            raise RuntimeError("the planner broke")

    async with Runtime(store) as rt:
        result = await rt.run(Broken, None, execution_id="broken", name="planner")
    assert result.status == "failed"
    assert result.error is not None
    assert "the planner broke" in result.error


class CounterOffer(BaseModel):
    approved: bool
    amount: int


class Negotiator(Actor[Plan]):
    kind = "agent"

    async def receive(self, message: Start) -> Any:
        def negotiate() -> CounterOffer:
            # A synchronous tool, in a worker thread: interrupt() works there too.
            with call_scope("tool:negotiate"):
                return interrupt("counter_offer", {"asked": 900}, expect=CounterOffer)

        offer = await anyio.to_thread.run_sync(negotiate)
        self.context.finish(offer.model_dump())


async def test_a_decision_must_fit_the_model_the_call_expects(store: Store) -> None:
    async with Runtime(store) as rt:
        paused = await rt.run(Negotiator, None, execution_id="offer", name="bot")
        assert paused.pending_interrupt is not None
        assert paused.pending_interrupt.agent_path == "agent:bot/tool:negotiate"
        with pytest.raises(ValidationError, match="amount"):
            await rt.resume(Negotiator, "offer", {"approved": True})  # no amount: refused
        assert await store.count_pending(execution_id="offer") == 1  # nothing consumed
        done = await rt.resume(Negotiator, "offer", {"approved": True, "amount": 700})
    assert done.status == "completed"
    assert done.output == {"approved": True, "amount": 700}


def test_resume_keeps_extra_fields() -> None:
    decision = Resume(approved=True, metadata={"approver": "alice"}, amount=120)
    assert decision.amount == 120  # type: ignore[attr-defined]
    again = Resume.model_validate(decision.model_dump(mode="json"))
    assert again.amount == 120  # type: ignore[attr-defined]
    assert again.metadata == {"approver": "alice"}


async def test_interrupt_outside_an_execution_says_where_to_call_it() -> None:
    with pytest.raises(UsageError, match=r"Runtime\.run"):
        interrupt("why")


async def test_a_program_that_seeds_random_still_gets_distinct_lease_owners(store: Store) -> None:
    # Lease owners carry random digits of tether's own; a program's random.seed must
    # not give two runtimes the same owner, which would let the second take a live lease.
    import random

    running, release = anyio.Event(), anyio.Event()

    class Waits(Actor[BaseModel]):
        kind = "flow"

        async def receive(self, message: Start) -> Any:
            running.set()
            await release.wait()
            self.context.finish("done")

    outcomes: list[str] = []

    async def first(rt: Runtime) -> None:
        outcomes.append((await rt.run(Waits, None, execution_id="seeded")).status)

    random.seed(20261201)
    async with Runtime(store) as a, anyio.create_task_group() as tg:
        tg.start_soon(first, a)
        await running.wait()
        random.seed(20261201)
        # (With the same owner, b would take the lease and wait in Waits: bounded, it fails instead.)
        with anyio.fail_after(10):
            async with Runtime(store) as b:
                with pytest.raises(LeaseHeld):
                    await b.run(Waits, None, execution_id="seeded")
        release.set()
    assert outcomes == ["completed"]
