"""Agent: the turn loop, tools, pauses, parallel calls and typed answers, on every store and both backends."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import anyio
import anyio.to_thread
import pytest
from pydantic import BaseModel
from tether.actors import (
    Agent,
    AssistantMessage,
    FunctionTool,
    Message,
    ScriptedLLM,
    ScriptExhausted,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from tether.runtime import AlreadyResumed, Resume, idempotent, interrupt
from tether.stores import ConfigurationError, Store, UsageError

RUNS: Counter[str] = Counter()
PAGED: list[int] = []


@pytest.fixture(autouse=True)
def _clean() -> None:
    RUNS.clear()
    PAGED.clear()


@idempotent
def page_manager(amount: int) -> str:
    PAGED.append(amount)
    return "paged"


def approve_refund(amount: int) -> dict[str, Any]:
    """Approve a refund; large ones wait for a manager."""
    RUNS["approve_refund"] += 1
    if amount > 10_000:
        page_manager(amount)  # before interrupt(): runs again on resume, pages once
        decision = interrupt("manager_approval", {"amount": amount})
        return {"approved": decision.approved}
    return {"approved": True}


def refund_bot(store: Store, llm: ScriptedLLM, **options: Any) -> Agent:
    return Agent(name="refund-bot", system_prompt="You process refunds.", llm=llm,
                 tools=[FunctionTool(approve_refund)], store=store, **options)


async def test_the_refund_flow(store: Store) -> None:
    llm = ScriptedLLM([ToolCall("approve_refund", {"amount": 50_000}), "Refund processed."])
    agent = refund_bot(store, llm)
    result = await agent.run("Process a $50k refund.", execution_id="job-1")
    assert result.status == "paused"
    assert result.pending_interrupt is not None
    assert result.pending_interrupt.agent_path == "agent:refund-bot/tool:approve_refund"
    assert result.pending_interrupt.context == {"amount": 50_000}
    assert llm.calls == 1

    result = await agent.resume("job-1", Resume(approved=True))
    assert result.status == "completed"
    assert result.output == "Refund processed."
    # The tool ran again with the decision; the LLM was not asked turn 1 again.
    assert RUNS["approve_refund"] == 2
    assert llm.calls == 2
    assert PAGED == [50_000]
    with pytest.raises(AlreadyResumed):
        await agent.resume("job-1", Resume(approved=False))


async def test_the_journal_holds_each_turn_once(store: Store) -> None:
    llm = ScriptedLLM([ToolCall("approve_refund", {"amount": 5}), "Done."])
    result = await refund_bot(store, llm).run("Refund $5.", execution_id="small")
    assert result.status == "completed"
    labels = [e.label for e in await store.read_journal("small") if e.label.startswith("turn:")]
    assert labels == ["turn:1", "turn:1/tool:approve_refund", "turn:2"]


async def test_the_llm_sees_the_whole_conversation(store: Store) -> None:
    seen: list[list[Message]] = []

    def script(messages: list[Message]) -> Any:
        seen.append(messages)
        return ToolCall("approve_refund", {"amount": 7}) if len(seen) == 1 else "ok"

    await refund_bot(store, ScriptedLLM(script)).run("Refund $7.", execution_id="conv")
    roles = [m.role for m in seen[1]]
    assert roles == ["system", "user", "assistant", "tool"]
    tool = seen[1][3]
    assert isinstance(tool, ToolMessage)
    assert json.loads(tool.content) == {"approved": True}
    assert tool.tool_call_id == "call_1_1"


async def test_bad_arguments_go_back_to_the_llm(store: Store) -> None:
    def script(messages: list[Message]) -> Any:
        last = messages[-1]
        if isinstance(last, UserMessage):
            return ToolCall("approve_refund", {"amount": "lots"})
        if isinstance(last, ToolMessage) and last.is_error and "amount" in last.content:
            return ToolCall("refund_everything", {})
        if isinstance(last, ToolMessage) and last.is_error and "no tool named" in last.content:
            return ToolCall("approve_refund", {"amount": 3})
        return f"final: {last.content}"

    result = await refund_bot(store, ScriptedLLM(script)).run("Refund.", execution_id="bad-args")
    assert result.status == "completed"
    assert result.output == 'final: {"approved": true}'
    assert RUNS["approve_refund"] == 1  # the invalid call never reached the function


async def test_a_failing_tool_is_told_to_the_llm(store: Store) -> None:
    def broken(order: str) -> str:
        raise LookupError(f"no order {order}")

    def script(messages: list[Message]) -> Any:
        last = messages[-1]
        return ToolCall("broken", {"order": "A1"}) if isinstance(last, UserMessage) else last.content

    agent = Agent(name="a", llm=ScriptedLLM(script), tools=[broken], store=store)
    result = await agent.run("Look it up.", execution_id="failing-tool")
    assert result.status == "completed"
    assert result.output == "LookupError: no order A1"


async def test_parallel_calls_run_concurrently(store: Store) -> None:
    left, right = anyio.Event(), anyio.Event()

    async def meet_left() -> str:
        left.set()
        await right.wait()  # deadlocks unless the other call runs at the same time
        return "left"

    async def meet_right() -> str:
        right.set()
        await left.wait()
        return "right"

    llm = ScriptedLLM([[ToolCall("meet_left"), ToolCall("meet_right")], "met"])
    agent = Agent(name="pair", llm=llm, tools=[meet_left, meet_right], store=store)
    with anyio.fail_after(10):
        result = await agent.run("Meet.", execution_id="pair")
    assert result.status == "completed"


async def test_a_parallel_interrupt_keeps_the_calls_that_finished(store: Store) -> None:
    def lookup(order: str) -> str:
        RUNS[f"lookup {order}"] += 1
        return f"order {order}"

    llm = ScriptedLLM([
        [ToolCall("lookup", {"order": "A"}), ToolCall("approve_refund", {"amount": 20_000}),
         ToolCall("lookup", {"order": "B"})],
        "Refunded.",
    ])
    agent = Agent(name="par", llm=llm, tools=[lookup, approve_refund], store=store)
    paused = await agent.run("Go.", execution_id="par")
    assert paused.status == "paused"
    assert paused.pending_interrupt is not None
    assert paused.pending_interrupt.agent_path == "agent:par/tool:approve_refund"
    done = await agent.resume("par", Resume(approved=True))
    assert done.status == "completed"
    assert RUNS == {"lookup A": 1, "lookup B": 1, "approve_refund": 2}
    assert llm.calls == 2
    # The same tool twice in a turn: each call has a label of its own.
    labels = {e.label for e in await store.read_journal("par")}
    assert {"turn:1/tool:lookup[0]", "turn:1/tool:lookup[2]", "turn:1/tool:approve_refund"} <= labels


async def test_two_interrupts_in_one_turn_are_two_pending_rows(store: Store) -> None:
    llm = ScriptedLLM([[ToolCall("approve_refund", {"amount": 20_000}),
                        ToolCall("approve_refund", {"amount": 30_000})], "Both decided."])
    agent = refund_bot(store, llm)
    paused = await agent.run("Two refunds.", execution_id="two")
    assert sorted(p.agent_path for p in paused.pending) == [
        "agent:refund-bot/tool:approve_refund[0]",
        "agent:refund-bot/tool:approve_refund[1]",
    ]
    still = await agent.resume("two", Resume(approved=True), path="agent:refund-bot/tool:approve_refund[1]")
    assert still.status == "paused"
    assert [p.agent_path for p in still.pending] == ["agent:refund-bot/tool:approve_refund[0]"]
    done = await agent.resume("two", Resume(approved=False), path="agent:refund-bot/tool:approve_refund[0]")
    assert done.status == "completed"
    assert done.output == "Both decided."
    assert llm.calls == 2


async def test_max_turns_fails_the_run_and_says_why(store: Store) -> None:
    llm = ScriptedLLM(lambda messages: ToolCall("approve_refund", {"amount": 1}))
    result = await refund_bot(store, llm, max_turns=3).run("Loop.", execution_id="loop")
    assert result.status == "failed"
    assert result.error is not None
    assert "MaxTurnsExceeded" in result.error and "max_turns" in result.error
    assert llm.calls == 3
    assert RUNS["approve_refund"] == 3


class Verdict(BaseModel):
    approved: bool
    reason: str


async def test_a_typed_answer_and_a_corrected_one(store: Store) -> None:
    def script(messages: list[Message]) -> Any:
        last = messages[-1]
        if isinstance(last, UserMessage) and "not valid Verdict" in last.content:
            return '```json\n{"approved": true, "reason": "under the limit"}\n```'
        return "Approved, I think."

    llm = ScriptedLLM(script)
    agent = Agent(name="judge", llm=llm, store=store, output_type=Verdict)
    result = await agent.run("Judge this refund.", execution_id="typed")
    assert result.status == "completed"
    assert result.output == Verdict(approved=True, reason="under the limit")
    assert llm.calls == 2
    # Asked again, the stored result comes back typed as well.
    again = await agent.run("Judge this refund.", execution_id="typed")
    assert again.output == result.output
    assert llm.calls == 2


async def test_a_run_is_linear_in_its_turns(db_store: Store) -> None:
    async def journal_bytes(turns: int) -> int:
        script: list[Any] = [ToolCall("approve_refund", {"amount": k}) for k in range(turns)]
        agent = refund_bot(db_store, ScriptedLLM([*script, "done"]), max_turns=turns + 1)
        result = await agent.run("Refund everything.", execution_id=f"long-{turns}")
        assert result.status == "completed"
        entries = await db_store.read_journal(f"long-{turns}")
        return sum(len(json.dumps(e.payload)) for e in entries)

    ratio = await journal_bytes(40) / await journal_bytes(10)
    assert 3.5 < ratio < 4.2, ratio  # fastaiagent 1.94 stores the whole conversation per turn: about 14


def test_definitions_are_checked() -> None:
    from tether.stores import MemoryStore

    store, llm = MemoryStore(), ScriptedLLM(["hi"])

    def varargs(*amounts: int) -> int:
        return sum(amounts)

    with pytest.raises(ConfigurationError, match="ordinary named parameters"):
        FunctionTool(varargs)
    with pytest.raises(ConfigurationError, match="two tools named"):
        Agent(name="a", llm=llm, store=store, tools=[approve_refund, FunctionTool(approve_refund)])
    with pytest.raises(ConfigurationError, match="at least one turn"):
        Agent(name="a", llm=llm, store=store, max_turns=0)
    with pytest.raises(ConfigurationError, match="no async complete"):
        Agent(name="a", llm="gpt-4o", store=store)  # type: ignore[arg-type]


async def test_input_must_be_text(store: Store) -> None:
    agent = Agent(name="a", llm=ScriptedLLM(["hi"]), store=store)
    with pytest.raises(ConfigurationError, match="user's text"):
        await agent.run({"text": "hi"}, execution_id="x")  # type: ignore[arg-type]
    assert await store.get_execution("x") is None


def test_a_tool_schema_comes_from_hints_and_docstring() -> None:
    def ship(order: str, express: bool = False) -> str:
        """Ship an order."""
        return order

    spec = FunctionTool(ship).spec
    assert spec.description == "Ship an order."
    assert spec.parameters["required"] == ["order"]
    properties = spec.parameters["properties"]
    assert isinstance(properties, dict)
    assert properties["express"] == {"default": False, "title": "Express", "type": "boolean"}


async def test_the_script_is_chosen_by_the_conversation() -> None:
    llm = ScriptedLLM(["first", ToolCall("x"), [ToolCall("y"), ToolCall("z")]])
    user = UserMessage(content="hi")
    assert (await llm.complete([user], [])).content == "first"
    two = [user, AssistantMessage(content="a"), AssistantMessage(content="b")]
    reply = await llm.complete(two, [])
    assert [c.name for c in reply.tool_calls] == ["y", "z"]
    assert llm.calls == 2
    with pytest.raises(ScriptExhausted, match="3 turns and was asked for turn 4"):
        await llm.complete([*two, AssistantMessage(content="c")], [])
    with pytest.raises(UsageError, match="not int"):
        await ScriptedLLM(lambda m: 42).complete([user], [])  # type: ignore[arg-type, return-value]


async def test_an_interrupt_inside_a_tools_task_group_still_pauses(store: Store) -> None:
    async def fan_out(amount: int) -> str:
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, approve_refund, amount)
        return "approved in a task group"

    llm = ScriptedLLM([ToolCall("fan_out", {"amount": 20_000}), "done"])
    agent = Agent(name="grouped", llm=llm, tools=[fan_out], store=store)
    paused = await agent.run("Go.", execution_id="grouped")
    assert paused.status == "paused"  # not told to the LLM as an ExceptionGroup
    assert paused.pending_interrupt is not None
    assert paused.pending_interrupt.agent_path == "agent:grouped/tool:fan_out"
    assert (await agent.resume("grouped", Resume(approved=True))).status == "completed"


async def test_a_result_that_is_not_json_says_the_tool_ran(store: Store) -> None:
    def charge() -> object:
        RUNS["charge"] += 1
        return object()

    llm = ScriptedLLM(lambda m: m[-1].content if m[-1].role == "tool" else ToolCall("charge"))
    result = await Agent(name="odd", llm=llm, tools=[charge], store=store).run("Charge.", execution_id="odd")
    assert result.status == "completed"
    assert "charge ran, but its result could not be encoded" in result.output
    assert RUNS["charge"] == 1


def test_tool_names_follow_the_protocol() -> None:
    with pytest.raises(ConfigurationError, match="is not 1-64 letters"):
        FunctionTool(approve_refund, name="approve#2")
