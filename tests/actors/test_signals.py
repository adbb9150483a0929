"""Pause signals are BaseExceptions: a user's ``except Exception`` never swallows a pause.

`interrupt()`, a durable `sleep()` and a paused ``ask`` raise `Suspension`, a
`BaseException` (as trio's ``Cancelled`` is). Each test wraps the pausing call
the way user code does (``try: ... except Exception:``), counts the ``except``
branch, and checks what the store says: the status, the pending rows, the
journal. Before the change the signals were ``Exception`` subclasses, and every
``except`` branch here ran: the run completed with the swallowed value instead
of pausing (and a durable sleep in an Agent tool was told to the LLM as a tool
error). Every store with a database, both backends.
"""

from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import pytest
from pydantic import BaseModel
from tether.actors import (
    Agent,
    Chain,
    Message,
    ScriptedLLM,
    Supervisor,
    ToolCall,
    ToolMessage,
    UserMessage,
    Worker,
)
from tether.runtime import (
    Actor,
    Resume,
    Runtime,
    Start,
    Suspension,
    call_scope,
    idempotency_key,
    idempotent,
    interrupt,
    sleep,
)
from tether.runtime.testing import run_due

if TYPE_CHECKING:
    from collections.abc import Callable

    from tether.runtime import RunResult
    from tether.runtime.testing import Clock
    from tether.stores import PendingInterrupt, Store

RUNS: Counter[str] = Counter()
SWALLOWED: Counter[str] = Counter()  # how often an ``except`` branch caught a pause
EFFECTS: list[str] = []
KEYS: list[str] = []
THREADS: dict[str, bool] = {}  # per function: did it run on the main thread (the event loop's)?


@pytest.fixture(autouse=True)
def _clean() -> None:
    for kept in (RUNS, SWALLOWED, EFFECTS, KEYS, THREADS):
        kept.clear()


async def only_pending(store: Store, execution_id: str) -> PendingInterrupt:
    """The one pending row of the execution (failing if there are none or several)."""
    rows = await store.list_pending(execution_id=execution_id)
    assert len(rows) == 1, rows
    return rows[0]


async def assert_paused_on_timer(store: Store, result: RunResult, due: Any) -> None:
    """Paused by a durable timer: no pending interrupt, a wake time at ``due``."""
    assert result.status == "paused"
    assert result.pending_interrupt is None and result.pending == []
    assert await store.count_pending(execution_id=result.execution_id) == 0
    execution = await store.get_execution(result.execution_id)
    assert execution is not None
    assert execution.status == "paused"
    assert execution.wake_at is not None
    assert abs(execution.wake_at - due) < timedelta(milliseconds=1)


def tool_results(journal: list[Any], label: str) -> list[dict[str, Any]]:
    """The tool messages journaled under ``label`` (``turn:1/tool:x``)."""
    return [e.payload["result"] for e in journal if e.label == label]


def tool_errors(journal: list[Any]) -> list[dict[str, Any]]:
    """Every tool message journaled as an error (what the LLM would read as a failed call)."""
    return [e.payload["result"] for e in journal
            if "/tool:" in e.label and isinstance(e.payload.get("result"), dict)
            and e.payload["result"].get("is_error")]


# -- 1. a Chain node ----------------------------------------------------------------


def approve_in_thread(state: dict[str, Any]) -> dict[str, Any]:
    """A sync node: it runs in a worker thread."""
    RUNS["approve_in_thread"] += 1
    THREADS["approve_in_thread"] = threading.current_thread() is threading.main_thread()
    try:
        decision = interrupt("manager_approval", {"amount": state["amount"]})
    except Exception:
        SWALLOWED["approve_in_thread"] += 1
        return {"approved": "swallowed"}
    return {"approved": decision.approved, "approver": decision.metadata.get("approver")}


async def approve_on_loop(state: dict[str, Any]) -> dict[str, Any]:
    """An async node: it runs on the event loop."""
    RUNS["approve_on_loop"] += 1
    THREADS["approve_on_loop"] = threading.current_thread() is threading.main_thread()
    try:
        await anyio.lowlevel.checkpoint()
        decision = interrupt("manager_approval", {"amount": state["amount"]})
    except Exception:
        SWALLOWED["approve_on_loop"] += 1
        return {"approved": "swallowed"}
    return {"approved": decision.approved, "approver": decision.metadata.get("approver")}


def charged(state: dict[str, Any]) -> dict[str, Any]:
    RUNS["charged"] += 1
    return {"charged": state["approved"] is True}


@pytest.mark.parametrize(("node", "in_thread"), [
    pytest.param(approve_in_thread, True, id="sync-node"),
    pytest.param(approve_on_loop, False, id="async-node"),
])
async def test_interrupt_in_a_chain_node_pauses_through_except_exception(
    db_store: Store, node: Callable[..., Any], in_thread: bool
) -> None:
    name = node.__name__
    chain = Chain("refund", [node, charged], store=db_store)
    paused = await chain.run({"amount": 50_000}, execution_id="c-1")
    assert paused.status == "paused"
    assert SWALLOWED == {}  # the except branch never ran
    assert THREADS[name] is not in_thread
    row = await only_pending(db_store, "c-1")
    assert row.agent_path == f"chain:refund/node:{name}"
    assert row.reason == "manager_approval" and row.context == {"amount": 50_000}
    assert paused.pending_interrupt == row
    assert RUNS == {name: 1}  # nothing after the node ran
    assert not [e for e in await db_store.read_journal("c-1") if e.label == f"node:{name}"]

    done = await chain.resume("c-1", Resume(approved=True, metadata={"approver": "alice"}))
    assert done.status == "completed"
    assert done.output == {"amount": 50_000, "approved": True, "approver": "alice", "charged": True}
    assert SWALLOWED == {}
    assert RUNS == {name: 2, "charged": 1}
    assert await db_store.count_pending(execution_id="c-1") == 0
    [step] = [e for e in await db_store.read_journal("c-1") if e.label == f"node:{name}"]
    assert step.payload["result"] == {"approved": True, "approver": "alice"}


# -- 2. an Agent tool ---------------------------------------------------------------


def approve_refund(amount: int) -> str:
    """Approve a refund (sync: runs in a worker thread)."""
    RUNS["approve_refund"] += 1
    THREADS["approve_refund"] = threading.current_thread() is threading.main_thread()
    try:
        decision = interrupt("manager_approval", {"amount": amount})
    except Exception as exc:
        SWALLOWED["approve_refund"] += 1
        return f"could not ask: {exc}"
    return f"refund of {amount} approved={decision.approved}"


async def approve_refund_async(amount: int) -> str:
    """Approve a refund (async)."""
    RUNS["approve_refund_async"] += 1
    try:
        await anyio.lowlevel.checkpoint()
        decision = interrupt("manager_approval", {"amount": amount})
    except Exception as exc:
        SWALLOWED["approve_refund_async"] += 1
        return f"could not ask: {exc}"
    return f"refund of {amount} approved={decision.approved}"


async def approve_refund_grouped(amount: int) -> str:
    """Approve a refund from a task of the tool's own task group."""
    RUNS["approve_refund_grouped"] += 1
    decisions: list[Resume] = []

    async def ask_manager() -> None:
        await anyio.lowlevel.checkpoint()
        decisions.append(interrupt("manager_approval", {"amount": amount}))

    async def look_up_order() -> None:
        await anyio.lowlevel.checkpoint()
        RUNS["look_up_order"] += 1

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(look_up_order)
            tg.start_soon(ask_manager)
    except Exception as exc:  # a group of Exceptions only: a pause inside keeps it a BaseExceptionGroup
        SWALLOWED["approve_refund_grouped"] += 1
        return f"could not ask: {exc!r}"
    return f"refund of {amount} approved={decisions[0].approved}"


def clerk(store: Store, tool: Callable[..., Any]) -> tuple[Agent, ScriptedLLM]:
    def script(messages: list[Message]) -> Any:
        last = messages[-1]
        if isinstance(last, UserMessage):
            return ToolCall(tool.__name__, {"amount": 50_000})
        assert isinstance(last, ToolMessage)
        return f"done: {last.content}"

    llm = ScriptedLLM(script)
    return Agent("clerk", llm=llm, tools=[tool], store=store), llm


@pytest.mark.parametrize("tool", [
    pytest.param(approve_refund, id="sync-tool"),
    pytest.param(approve_refund_async, id="async-tool"),
    pytest.param(approve_refund_grouped, id="tool-task-group"),
])
async def test_interrupt_in_an_agent_tool_pauses_through_except_exception(
    db_store: Store, tool: Callable[..., Any]
) -> None:
    name = tool.__name__
    label = f"turn:1/tool:{name}"
    agent, llm = clerk(db_store, tool)
    paused = await agent.run("Refund $50k.", execution_id="a-1")
    assert paused.status == "paused"
    assert SWALLOWED == {}
    row = await only_pending(db_store, "a-1")
    assert row.agent_path == f"agent:clerk/tool:{name}"
    assert row.context == {"amount": 50_000}
    assert llm.calls == 1
    journal = await db_store.read_journal("a-1")
    assert tool_results(journal, label) == []  # nothing was told to the LLM
    assert tool_errors(journal) == []
    if name == "approve_refund":
        assert THREADS[name] is False  # it ran in a worker thread

    done = await agent.resume("a-1", Resume(approved=True))
    assert done.status == "completed"
    answer = "refund of 50000 approved=True"
    assert done.output == f"done: {answer}"
    assert SWALLOWED == {}
    assert RUNS[name] == 2
    assert llm.calls == 2
    seen = llm.requests[1].messages[-1]  # what the LLM read as the tool's result
    assert isinstance(seen, ToolMessage)
    assert (seen.content, seen.is_error) == (answer, False)
    journal = await db_store.read_journal("a-1")
    [result] = tool_results(journal, label)
    assert (result["content"], result["is_error"]) == (answer, False)
    assert tool_errors(journal) == []


# -- 3. a Supervisor worker's tool --------------------------------------------------


async def test_interrupt_in_a_supervisor_workers_tool_pauses_through_except_exception(db_store: Store) -> None:
    auditor_llm = ScriptedLLM([ToolCall("approve_refund", {"amount": 70_000}), "Audit passed."])
    auditor = Worker(Agent("auditor", llm=auditor_llm, tools=[approve_refund]), "auditor", "Audits refunds.")
    boss_llm = ScriptedLLM([ToolCall("delegate_to_auditor", {"task": "Audit refund R1."}), "R1 is fine."])
    boss = Supervisor("planner", llm=boss_llm, workers=[auditor], store=db_store)

    paused = await boss.run("Check R1.", execution_id="s-1")
    assert paused.status == "paused"
    assert SWALLOWED == {}
    row = await only_pending(db_store, "s-1")
    assert row.agent_path == "supervisor:planner/worker:auditor/tool:approve_refund"
    assert row.context == {"amount": 70_000}
    assert (boss_llm.calls, auditor_llm.calls) == (1, 1)
    assert tool_errors(await db_store.read_journal("s-1")) == []

    done = await boss.resume("s-1", Resume(approved=True))
    assert done.status == "completed"
    assert done.output == "R1 is fine."
    assert SWALLOWED == {}
    assert RUNS == {"approve_refund": 2}
    seen = auditor_llm.requests[-1].messages[-1]
    assert isinstance(seen, ToolMessage)
    assert (seen.content, seen.is_error) == ("refund of 70000 approved=True", False)
    assert await db_store.count_pending(execution_id="s-1") == 0
    assert tool_errors(await db_store.read_journal("s-1")) == []


# -- a paused ask() in a user's own actor -------------------------------------------


class Audit(BaseModel):
    amount: int


class Auditor(Actor[BaseModel]):
    kind = "worker"
    messages = (Audit,)

    async def receive(self, message: Audit) -> Any:
        RUNS["auditor"] += 1
        return interrupt("manager_approval", {"amount": message.amount}).approved


class Planner(Actor[BaseModel]):
    kind = "supervisor"

    async def receive(self, message: Start) -> Any:
        assert isinstance(message.input, dict)
        auditor = await self.context.spawn(Auditor, "auditor", durable=True)
        try:
            verdict = await auditor.ask(Audit(amount=message.input["amount"]))
        except Exception as exc:  # the asked actor paused: Suspended is not an Exception
            SWALLOWED["planner"] += 1
            verdict = f"no verdict: {exc}"
        self.context.finish({"verdict": verdict})


async def test_a_paused_ask_passes_through_except_exception(db_store: Store) -> None:
    async with Runtime(db_store) as rt:
        paused = await rt.run(Planner, {"amount": 9_000}, execution_id="ask-1", name="planner")
        assert paused.status == "paused"
        assert SWALLOWED == {}
        row = await only_pending(db_store, "ask-1")
        assert row.agent_path == "supervisor:planner/worker:auditor"
        done = await rt.resume(Planner, "ask-1", Resume(approved=True))
    assert done.status == "completed"
    assert done.output == {"verdict": True}
    assert SWALLOWED == {}
    assert RUNS == {"auditor": 2}


# -- 4. durable timers --------------------------------------------------------------


async def wait_an_hour(order: str) -> str:
    """Wait an hour for the warehouse, durably; any error becomes a message."""
    RUNS["wait_an_hour"] += 1
    try:
        await sleep(3600)
    except Exception as exc:
        SWALLOWED["wait_an_hour"] += 1
        return f"could not wait: {exc}"
    return f"order {order} is ready"


async def wait_an_hour_plainly(order: str) -> str:
    """Wait an hour for the warehouse, durably, with no try at all."""
    RUNS["wait_an_hour_plainly"] += 1
    await sleep(3600)
    return f"order {order} is ready"


@pytest.mark.parametrize("tool", [
    pytest.param(wait_an_hour, id="in-try-except-exception"),
    pytest.param(wait_an_hour_plainly, id="no-try"),
])
async def test_a_durable_sleep_in_an_agent_tool_parks_the_run_not_a_tool_error(
    db_store: Store, tether_clock: Clock, tool: Callable[..., Any]
) -> None:
    name = tool.__name__
    label = f"turn:1/tool:{name}"

    def script(messages: list[Message]) -> Any:
        last = messages[-1]
        if isinstance(last, UserMessage):
            return ToolCall(name, {"order": "A1"})
        assert isinstance(last, ToolMessage)
        return f"told: {last.content}"

    llm = ScriptedLLM(script)
    agent = Agent("dispatcher", llm=llm, tools=[tool], store=db_store)
    started = tether_clock.now()
    paused = await agent.run("Ship A1 once it is ready.", execution_id="sleep-1")
    await assert_paused_on_timer(db_store, paused, started + timedelta(hours=1))
    assert SWALLOWED == {}
    assert llm.calls == 1
    journal = await db_store.read_journal("sleep-1")
    assert tool_results(journal, label) == []  # the LLM was told nothing, least of all an error
    assert tool_errors(journal) == []

    tether_clock.advance(minutes=59)
    assert await run_due(agent) == []  # not due yet: nothing runs
    assert RUNS[name] == 1
    tether_clock.advance(minutes=1)
    [done] = await run_due(agent)
    assert done.execution_id == "sleep-1"
    assert done.status == "completed"
    assert done.output == "told: order A1 is ready"
    assert SWALLOWED == {}
    assert RUNS[name] == 2
    assert llm.calls == 2
    seen = llm.requests[1].messages[-1]
    assert isinstance(seen, ToolMessage)
    assert (seen.content, seen.is_error) == ("order A1 is ready", False)
    journal = await db_store.read_journal("sleep-1")
    [result] = tool_results(journal, label)
    assert (result["content"], result["is_error"]) == ("order A1 is ready", False)
    assert tool_errors(journal) == []
    assert await run_due(agent) == []


async def remind_tomorrow(state: dict[str, Any]) -> dict[str, Any]:
    RUNS["remind_tomorrow"] += 1
    try:
        await sleep(timedelta(days=1).total_seconds())
    except Exception as exc:
        SWALLOWED["remind_tomorrow"] += 1
        return {"reminded": f"no: {exc}"}
    return {"reminded": True}


async def test_a_durable_sleep_in_a_chain_node_parks_through_except_exception(
    db_store: Store, tether_clock: Clock
) -> None:
    chain = Chain("reminder", [remind_tomorrow, charged], store=db_store)
    started = tether_clock.now()
    paused = await chain.run({"approved": True}, execution_id="sleep-2")
    await assert_paused_on_timer(db_store, paused, started + timedelta(days=1))
    assert SWALLOWED == {}
    assert RUNS == {"remind_tomorrow": 1}
    assert not [e for e in await db_store.read_journal("sleep-2") if e.label == "node:remind_tomorrow"]

    tether_clock.advance(hours=23)
    assert await run_due(chain) == []
    tether_clock.advance(hours=1)
    [done] = await run_due(chain)
    assert done.status == "completed"
    assert done.output == {"approved": True, "reminded": True, "charged": True}
    assert SWALLOWED == {}
    assert RUNS == {"remind_tomorrow": 2, "charged": 1}


# -- 5. a failure beside a pause ----------------------------------------------------


def split(state: dict[str, Any]) -> dict[str, Any]:
    return {"split": True}


def charge_card(state: dict[str, Any]) -> dict[str, Any]:
    RUNS["charge_card"] += 1
    raise ValueError("card declined")


def ask_manager(state: dict[str, Any]) -> dict[str, Any]:
    RUNS["ask_manager"] += 1
    try:
        decision = interrupt("manager_approval", {"amount": 1})
    except Exception:
        SWALLOWED["ask_manager"] += 1
        return {"approved": "swallowed"}
    return {"approved": decision.approved}


async def test_a_failing_node_beside_a_pausing_one_fails_the_round(db_store: Store) -> None:
    chain = Chain("fan", store=db_store)
    for fn in (split, charge_card, ask_manager):
        chain.add_node(fn)
    chain.add_edge("split", "charge_card")
    chain.add_edge("split", "ask_manager")
    result = await chain.run({}, execution_id="fan-1")
    assert result.status == "failed"
    assert result.pending_interrupt is None and result.pending == []
    assert RUNS == {"charge_card": 1, "ask_manager": 1}  # both branches ran, and settled
    assert SWALLOWED == {}
    # The real error, and only it: the branch that paused is not part of the failure.
    assert result.error == "ValueError: card declined"
    execution = await db_store.get_execution("fan-1")
    assert execution is not None
    assert (execution.status, execution.error) == ("failed", "ValueError: card declined")
    assert await db_store.count_pending(execution_id="fan-1") == 0


@idempotent
def record_charge(amount: int) -> str:
    EFFECTS.append(f"charge {amount}")
    return "charged"


async def charge(amount: int) -> str:
    """Charge the card (wrongly: a sync @idempotent called on the event loop's thread)."""
    RUNS["charge"] += 1
    return record_charge(amount)


async def test_a_failing_tool_call_beside_a_pausing_one_fails_the_turn(db_store: Store) -> None:
    llm = ScriptedLLM([[ToolCall("charge", {"amount": 5}), ToolCall("approve_refund_async", {"amount": 5})],
                       "never"])
    agent = Agent("till", llm=llm, tools=[charge, approve_refund_async], store=db_store)
    result = await agent.run("Charge and refund.", execution_id="par-1")
    assert result.status == "failed"
    assert result.pending_interrupt is None and result.pending == []
    assert RUNS == {"charge": 1, "approve_refund_async": 1}
    assert SWALLOWED == {}
    assert result.error is not None
    assert result.error.startswith("UsageError: @idempotent")
    assert "event loop's thread" in result.error
    assert "nterrupt" not in result.error and "Suspen" not in result.error
    execution = await db_store.get_execution("par-1")
    assert execution is not None
    assert (execution.status, execution.error) == ("failed", result.error)
    assert await db_store.count_pending(execution_id="par-1") == 0
    assert llm.calls == 1
    assert EFFECTS == []


# -- 6. code that catches BaseException, and @idempotent ----------------------------


def with_fallback(fn: Callable[[], Any], fallback: Any) -> Any:
    """A helper in the style of many libraries: any error becomes the fallback."""
    try:
        return fn()
    except Exception:
        SWALLOWED["with_fallback"] += 1
        return fallback


async def hold_seat(state: dict[str, Any]) -> dict[str, Any]:
    RUNS["hold_seat"] += 1
    EFFECTS.append("held")
    try:
        if state.get("broken"):
            raise LookupError("no such seat")
        decision = with_fallback(lambda: interrupt("seat_approval", {"seat": "12A"}), Resume(approved=False))
    except Suspension:  # the documented pattern: a pause goes on up, untouched
        EFFECTS.append("kept while paused")
        raise
    except BaseException as exc:  # anything else (an error, a cancellation): undo, and report
        EFFECTS.append("released")
        return {"seat": f"released after {type(exc).__name__}"}
    return {"seat": "12A" if decision.approved else "refused"}


async def test_code_that_catches_base_exception_and_re_raises_suspension_first(db_store: Store) -> None:
    assert issubclass(Suspension, BaseException) and not issubclass(Suspension, Exception)
    chain = Chain("booking", [hold_seat], store=db_store)
    paused = await chain.run({}, execution_id="b-1")
    assert paused.status == "paused"
    assert (await only_pending(db_store, "b-1")).agent_path == "chain:booking/node:hold_seat"
    assert SWALLOWED == {}
    assert EFFECTS == ["held", "kept while paused"]

    done = await chain.resume("b-1", Resume(approved=True))
    assert done.status == "completed"
    assert done.output == {"seat": "12A"}
    assert EFFECTS == ["held", "kept while paused", "held"]
    assert SWALLOWED == {}

    # The same handler still deals with a real error.
    EFFECTS.clear()
    failed = await chain.run({"broken": True}, execution_id="b-2")
    assert failed.status == "completed"
    assert failed.output == {"broken": True, "seat": "released after LookupError"}
    assert EFFECTS == ["held", "released"]
    assert await db_store.count_pending(execution_id="b-2") == 0


@idempotent
def refund_once(amount: int) -> str:
    """The side effect comes after the approval, inside the recorded function."""
    RUNS["refund_once"] += 1
    KEYS.append(idempotency_key())
    try:
        decision = interrupt("manager_approval", {"amount": amount})
    except Exception:
        SWALLOWED["refund_once"] += 1
        return "not asked"
    if not decision.approved:
        return "refused"
    EFFECTS.append(f"refund {amount}")
    return "refunded"


def refund_then_confirm(state: dict[str, Any]) -> dict[str, Any]:
    RUNS["node"] += 1
    outcome = refund_once(state["amount"])
    with call_scope("confirm"):  # a second approval: the node runs a third time
        confirmed = interrupt("confirm_refund", {"outcome": outcome}).approved
    return {"outcome": outcome, "confirmed": confirmed}


async def test_an_idempotent_function_that_interrupts_records_only_after_the_resume(db_store: Store) -> None:
    chain = Chain("refund", [refund_then_confirm], store=db_store)
    paused = await chain.run({"amount": 300}, execution_id="i-1")
    assert paused.status == "paused"
    assert (await only_pending(db_store, "i-1")).agent_path == "chain:refund/node:refund_then_confirm"
    assert SWALLOWED == {}
    assert EFFECTS == []
    [key] = set(KEYS)
    assert await db_store.get_idempotent("i-1", key) is None  # the pause recorded nothing

    confirming = await chain.resume("i-1", Resume(approved=True))
    assert confirming.status == "paused"
    row = await only_pending(db_store, "i-1")
    assert row.agent_path == "chain:refund/node:refund_then_confirm/confirm"
    assert row.context == {"outcome": "refunded"}
    assert EFFECTS == ["refund 300"]  # once, after the approval
    assert set(KEYS) == {key}  # the same call, the same key
    record = await db_store.get_idempotent("i-1", key)
    # The result, with the decision its body took (given again when the record answers for it).
    assert record is not None and record.value["v"] == "refunded"  # type: ignore[index, call-overload]
    assert [taken[:2] for taken in record.value["taken"]] == [  # type: ignore[index, call-overload]
        ["chain:refund/node:refund_then_confirm", "manager_approval"]]

    done = await chain.resume("i-1", Resume(approved=True))
    assert done.status == "completed"
    assert done.output == {"amount": 300, "outcome": "refunded", "confirmed": True}
    assert EFFECTS == ["refund 300"]  # the third run read the record
    assert RUNS == {"node": 3, "refund_once": 2}
    assert SWALLOWED == {}


@idempotent
def refund_after_approval(amount: int) -> str:
    decision = interrupt("manager_approval", {"amount": amount})
    EFFECTS.append(f"refund {amount}")
    return "refunded" if decision.approved else "refused"


def refund_then_confirm_here(state: dict[str, Any]) -> dict[str, Any]:
    outcome = refund_after_approval(state["amount"])
    confirmed = interrupt("confirm_refund", {"outcome": outcome})  # the same path: no call_scope of its own
    return {"outcome": outcome, "confirmed": confirmed.approved}


async def test_each_decision_reaches_its_own_interrupt_after_an_idempotent_call_that_interrupted(
    db_store: Store,
) -> None:
    # Two interrupts one after another at one path get their decisions in call order. The
    # first is inside an @idempotent function: once recorded, a replay does not call it.
    chain = Chain("refund", [refund_then_confirm_here], store=db_store)
    first = await chain.run({"amount": 300}, execution_id="i-2")
    assert first.pending_interrupt is not None and first.pending_interrupt.reason == "manager_approval"
    second = await chain.resume("i-2", Resume(approved=True))
    assert second.pending_interrupt is not None and second.pending_interrupt.reason == "confirm_refund"
    assert EFFECTS == ["refund 300"]

    done = await chain.resume("i-2", Resume(approved=False))  # the confirmation is refused
    assert done.status == "completed"
    assert EFFECTS == ["refund 300"]
    # The refusal must reach confirm_refund; the manager's approval was for the other call.
    assert done.output == {"amount": 300, "outcome": "refunded", "confirmed": False}
