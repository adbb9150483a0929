"""Step timeouts (nodes, tools, LLM calls) and shielded steps, on every store and both backends.

A step that must overrun awaits an `anyio.Event` nobody sets; timeouts are a
few hundredths of a second, so the failing cases cost that long and no more.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import pytest
from tether.actors import (
    Agent,
    AssistantMessage,
    Chain,
    FunctionTool,
    ScriptedLLM,
    Supervisor,
    ToolCall,
    ToolMessage,
)
from tether.actors._steps import within
from tether.runtime import Resume, StepTimeout, Suspension, TetherError, interrupt
from tether.stores import ConfigurationError, Store

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tether.actors import Message, ToolSpec

SHORT = 0.05  # the timeout of a step that must overrun: it waits forever otherwise
RUNS: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _clean() -> None:
    RUNS.clear()


async def forever() -> None:
    await anyio.Event().wait()  # nobody sets it


def labels(entries: Sequence[Any]) -> list[str]:
    return [e.label for e in entries]


# -- nodes -----------------------------------------------------------------------------


async def test_a_node_that_overruns_fails_the_run_with_step_timeout(store: Store) -> None:
    async def stuck(state: dict[str, Any]) -> dict[str, Any]:
        RUNS["stuck"] += 1
        await forever()
        return {}

    async def after(state: dict[str, Any]) -> dict[str, Any]:
        RUNS["after"] += 1
        return {}

    chain = Chain("refund", store=store)
    chain.add_node(stuck, timeout=SHORT)
    chain.add_node(after)
    chain.add_edge("stuck", "after")
    with anyio.fail_after(10):
        done = await chain.run({}, execution_id="slow-node")
    assert done.status == "failed"
    assert done.error is not None
    assert "StepTimeout" in done.error
    assert "'chain:refund/node:stuck'" in done.error
    assert f"timeout={SHORT:g}s" in done.error
    assert RUNS == {"stuck": 1}
    assert "node:stuck" not in labels(await store.read_journal("slow-node"))


async def test_a_node_that_finishes_in_time_is_unaffected(store: Store) -> None:
    async def quick(state: dict[str, Any]) -> dict[str, Any]:
        await anyio.lowlevel.checkpoint()
        return {"quick": True}

    chain = Chain("quick", store=store)
    chain.add_node(quick, timeout=timedelta(minutes=1))
    done = await chain.run({}, execution_id="quick")
    assert done.status == "completed"
    assert done.output == {"quick": True}


async def test_an_interrupt_in_a_node_with_a_timeout_pauses(store: Store) -> None:
    async def approve(state: dict[str, Any]) -> dict[str, Any]:
        RUNS["approve"] += 1
        decision = interrupt("manager_approval", {"amount": state["amount"]})
        return {"approved": decision.approved}

    chain = Chain("gate", store=store)
    chain.add_node(approve, timeout=60)
    paused = await chain.run({"amount": 50_000}, execution_id="gate")
    assert paused.status == "paused"  # a pause is no failure, and no timeout
    assert paused.pending_interrupt is not None
    assert paused.pending_interrupt.agent_path == "chain:gate/node:approve"
    done = await chain.resume("gate", Resume(approved=True))
    assert done.status == "completed"
    assert done.output == {"amount": 50_000, "approved": True}
    assert RUNS == {"approve": 2}


# -- tools -----------------------------------------------------------------------------


async def test_a_tool_that_overruns_is_told_to_the_llm(store: Store) -> None:
    async def lookup(order: str) -> str:
        RUNS["lookup"] += 1
        await forever()
        return "found"

    def script(messages: list[Message]) -> Any:
        last = messages[-1]
        return last.content if isinstance(last, ToolMessage) else ToolCall("lookup", {"order": "A1"})

    llm = ScriptedLLM(script)
    agent = Agent(name="bot", llm=llm, tools=[FunctionTool(lookup, timeout=SHORT)], store=store)
    with anyio.fail_after(10):
        done = await agent.run("Find A1.", execution_id="slow-tool")
    assert done.status == "completed"  # the LLM heard of it and answered
    told = llm.requests[1].messages[-1]
    assert isinstance(told, ToolMessage)
    assert told.is_error
    assert told.content.startswith("StepTimeout: Step 'agent:bot/tool:lookup' did not finish")
    assert done.output == told.content
    # Journaled like any result: a replay does not call the tool again.
    assert "turn:1/tool:lookup" in labels(await store.read_journal("slow-tool"))
    assert RUNS == {"lookup": 1}


async def test_a_tool_that_finishes_in_time_is_unaffected(store: Store) -> None:
    async def lookup(order: str) -> str:
        await anyio.lowlevel.checkpoint()
        return f"order {order}"

    llm = ScriptedLLM([ToolCall("lookup", {"order": "A1"}), "Found it."])
    agent = Agent(name="bot", llm=llm, tools=[FunctionTool(lookup, timeout=60)], store=store)
    done = await agent.run("Find A1.", execution_id="quick-tool")
    assert done.status == "completed"
    told = llm.requests[1].messages[-1]
    assert isinstance(told, ToolMessage)
    assert (told.content, told.is_error) == ("order A1", False)


async def test_an_interrupt_in_a_tool_with_a_timeout_pauses(store: Store) -> None:
    async def approve_refund(amount: int) -> dict[str, bool]:
        RUNS["approve_refund"] += 1
        return {"approved": interrupt("manager_approval", {"amount": amount}).approved}

    llm = ScriptedLLM([ToolCall("approve_refund", {"amount": 50_000}), "Refunded."])
    agent = Agent(name="bot", llm=llm, tools=[FunctionTool(approve_refund, timeout=60)], store=store)
    paused = await agent.run("Refund.", execution_id="tool-gate")
    assert paused.status == "paused"
    assert paused.pending_interrupt is not None
    assert paused.pending_interrupt.agent_path == "agent:bot/tool:approve_refund"
    done = await agent.resume("tool-gate", Resume(approved=True))
    assert done.status == "completed"
    assert RUNS == {"approve_refund": 2}


# -- LLM calls -------------------------------------------------------------------------


class StuckLLM:
    """An LLM that never answers."""

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> AssistantMessage:
        RUNS["llm"] += 1
        await forever()
        raise AssertionError("unreachable")


async def test_an_llm_call_that_overruns_fails_the_run(store: Store) -> None:
    agent = Agent(name="bot", llm=StuckLLM(), store=store, llm_timeout=SHORT)
    with anyio.fail_after(10):
        done = await agent.run("Hello.", execution_id="slow-llm")
    assert done.status == "failed"
    assert done.error is not None
    assert "StepTimeout" in done.error
    assert "'agent:bot/turn:1'" in done.error
    assert f"llm_timeout={SHORT:g}s" in done.error
    assert "turn:1" not in labels(await store.read_journal("slow-llm"))


async def test_an_llm_call_that_finishes_in_time_is_unaffected(store: Store) -> None:
    agent = Agent(name="bot", llm=ScriptedLLM(["Hello yourself."]), store=store, llm_timeout=60)
    done = await agent.run("Hello.", execution_id="quick-llm")
    assert done.status == "completed"
    assert done.output == "Hello yourself."


# -- shielded steps --------------------------------------------------------------------


@pytest.mark.parametrize("shielded", [True, False], ids=["shielded", "unshielded"])
async def test_a_shielded_node_finishes_when_the_run_is_cancelled(store: Store, shielded: bool) -> None:
    charged: list[int] = []
    entered, proceed = anyio.Event(), anyio.Event()

    async def charge(state: dict[str, Any]) -> dict[str, Any]:
        entered.set()
        await proceed.wait()
        for _ in range(3):
            await anyio.lowlevel.checkpoint()  # where a cancel would cut an unshielded node
        charged.append(state["amount"])
        return {"charged": True}

    async def notify(state: dict[str, Any]) -> dict[str, Any]:
        await anyio.lowlevel.checkpoint()  # the cancel lands at the first await after the shield
        RUNS["notify"] += 1
        return {"notified": True}

    chain = Chain("pay", store=store)
    chain.add_node(charge, shielded=shielded)
    chain.add_node(notify)
    chain.add_edge("charge", "notify")
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(chain.run, {"amount": 5}, execution_id="pay"))
            await entered.wait()
            tg.cancel_scope.cancel()  # as a process shutting down cancels what it runs
            proceed.set()
    journal = labels(await store.read_journal("pay"))
    assert RUNS["notify"] == 0  # the cancel took effect after the node
    if shielded:
        assert charged == [5]
        assert "node:charge" in journal  # its update is journaled too
    else:
        assert charged == []
        assert "node:charge" not in journal
    # Recovery continues from the journal: a shielded node that finished is not run again.
    done = await chain.resume("pay")
    assert done.status == "completed"
    assert done.output == {"amount": 5, "charged": True, "notified": True}
    assert charged == [5]
    assert RUNS["notify"] == 1


async def test_a_shielded_tool_finishes_when_the_run_is_cancelled(store: Store) -> None:
    charged: list[int] = []
    entered, proceed = anyio.Event(), anyio.Event()

    async def charge_card(amount: int) -> str:
        entered.set()
        await proceed.wait()
        for _ in range(3):
            await anyio.lowlevel.checkpoint()
        charged.append(amount)
        return "receipt-1"

    llm = ScriptedLLM([ToolCall("charge_card", {"amount": 5}), "Charged."])
    agent = Agent(name="bot", llm=llm, tools=[FunctionTool(charge_card, shielded=True)], store=store)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(agent.run, "Charge $5.", execution_id="card"))
            await entered.wait()
            tg.cancel_scope.cancel()
            proceed.set()
    assert charged == [5]
    assert "turn:1/tool:charge_card" in labels(await store.read_journal("card"))
    done = await agent.resume("card")
    assert done.status == "completed"
    assert done.output == "Charged."
    assert charged == [5]  # the recovery read the charge from the journal


# -- the timeout's cancel scope --------------------------------------------------------


async def test_an_enclosing_cancel_is_not_a_timeout() -> None:
    async def overrun_then_cancel() -> None:
        start = anyio.current_time()
        while anyio.current_time() < start + 0.01:
            pass  # past the step's deadline without an await: both scopes are cut below
        outer.cancel()
        await forever()

    with anyio.CancelScope() as outer:
        await within(0.001, "chain:c/node:n", overrun_then_cancel)
    assert outer.cancelled_caught  # the cancellation came out as itself, not as StepTimeout


async def test_a_pause_and_the_steps_own_timeout_error_pass_through() -> None:
    async def pause() -> None:
        raise Suspension("paused")

    async def own_timeout() -> None:
        with anyio.fail_after(0):
            await anyio.lowlevel.checkpoint()

    with pytest.raises(Suspension):
        await within(60, "chain:c/node:n", pause)
    with pytest.raises(TimeoutError) as raised:
        await within(60, "chain:c/node:n", own_timeout)
    assert not isinstance(raised.value, StepTimeout)


async def test_step_timeout_says_which_step_and_how_long() -> None:
    with pytest.raises(StepTimeout) as raised:
        await within(0.01, "agent:a/tool:t", forever)
    error = raised.value
    assert (error.path, error.seconds) == ("agent:a/tool:t", 0.01)
    assert isinstance(error, TetherError)
    assert isinstance(error, TimeoutError)
    assert str(error) == ("Step 'agent:a/tool:t' did not finish within its timeout=0.01s and was cancelled. "
                          "Raise timeout= if it needs longer, or make the step faster.")


# -- declarations ----------------------------------------------------------------------


async def anode(state: Any) -> dict[str, Any]:
    return {}


def snode(state: Any) -> dict[str, Any]:
    return {}


async def atool() -> str:
    return ""


def stool() -> str:
    return ""


@pytest.mark.parametrize("bad", [0, -1, timedelta(0), math.nan], ids=["zero", "negative", "timedelta0", "nan"])
def test_a_timeout_must_be_positive(bad: float | timedelta) -> None:
    with pytest.raises(ConfigurationError, match="positive number of seconds"):
        Chain("c").add_node(anode, timeout=bad)
    with pytest.raises(ConfigurationError, match="positive number of seconds"):
        FunctionTool(atool, timeout=bad)
    with pytest.raises(ConfigurationError, match=r"llm_timeout=.*positive number of seconds"):
        Agent("a", llm=ScriptedLLM(["hi"]), llm_timeout=bad)


def test_a_shielded_step_cannot_time_out() -> None:
    chain = Chain("c")
    with pytest.raises(ConfigurationError, match="shielded step runs to its end"):
        chain.add_node(anode, timeout=5, shielded=True)
    assert "anode" not in chain.definition()["nodes"]  # refused: nothing was added
    with pytest.raises(ConfigurationError, match="shielded step runs to its end"):
        FunctionTool(atool, timeout=5, shielded=True)


def test_a_sync_step_refuses_a_timeout() -> None:
    with pytest.raises(ConfigurationError, match="worker thread, which a timeout cannot stop"):
        Chain("c").add_node(snode, timeout=5)
    with pytest.raises(ConfigurationError, match="worker thread, which a timeout cannot stop"):
        FunctionTool(stool, timeout=5)
    # A shield is fine: a thread runs to its end anyway, and the shield covers its record.
    assert FunctionTool(stool, shielded=True).shielded
    assert Chain("c").add_node(snode, shielded=True) == "snode"


def test_timeouts_are_seconds() -> None:
    assert FunctionTool(atool, timeout=timedelta(seconds=2)).timeout == 2.0
    assert FunctionTool(atool).timeout is None
    assert Agent("a", llm=ScriptedLLM(["hi"]), llm_timeout=timedelta(milliseconds=1500)).llm_timeout == 1.5
    supervisor = Supervisor("s", llm=ScriptedLLM(["hi"]), workers=[], llm_timeout=30)
    assert supervisor.agent.llm_timeout == 30.0
