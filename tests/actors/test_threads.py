"""Threads: runs that continue a conversation, each its own execution, on every store and both backends."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel
from tether.actors import (
    Agent,
    AssistantMessage,
    Chain,
    Message,
    ScriptedLLM,
    Supervisor,
    Swarm,
    ToolCall,
    ToolMessage,
    UserMessage,
    Worker,
)
from tether.runtime import Resume, interrupt
from tether.runtime.testing import crash_at
from tether.stores import ConfigurationError, Store


def lookup(query: str) -> str:
    return f"found {query}"


def ask_manager(amount: int) -> str:
    return "approved" if interrupt("manager_approval", {"amount": amount}).approved else "refused"


def looks_up_then_answers(messages: list[Message]) -> Any:
    """Each run: look the user's text up, then answer with how many messages it saw."""
    last = messages[-1]
    if isinstance(last, UserMessage):
        return ToolCall("lookup", {"query": last.content})
    return f"answer after {len(messages)} messages"


def bot(store: Store, llm: ScriptedLLM, **options: Any) -> Agent:
    return Agent("bot", llm=llm, tools=[lookup, ask_manager], system_prompt="Be brief.", store=store, **options)


def said(messages: list[Message]) -> list[str]:
    """A conversation as ``role:content`` lines; a tool call as ``assistant:call(name)``."""
    lines = []
    for m in messages:
        if isinstance(m, AssistantMessage) and m.tool_calls:
            lines.append("assistant:" + ",".join(f"call({c.name})" for c in m.tool_calls))
        else:
            lines.append(f"{m.role}:{m.content}")
    return lines


def one_run(n: int, seen: int) -> list[str]:
    """What run ``n`` of `looks_up_then_answers` added, the first of its turns having seen ``seen`` messages."""
    return [f"user:q{n}", "assistant:call(lookup)", f"tool:found q{n}", f"assistant:answer after {seen + 2} messages"]


async def payload_bytes(store: Store, execution_id: str) -> int:
    return sum(len(json.dumps(e.payload)) for e in await store.read_journal(execution_id))


async def test_a_thread_of_twenty_runs_continues_and_stores_each_run_once(store: Store) -> None:
    llm = ScriptedLLM(looks_up_then_answers)
    agent = bot(store, llm)
    sizes = []
    expected = ["system:Be brief."]
    for n in range(1, 21):
        asked = llm.calls
        result = await agent.run(f"q{n}", execution_id=f"chat-{n}", thread="chat")
        assert result.status == "completed"
        # The run's first turn saw every message of the runs before it, then the user's text.
        first = llm.requests[asked].messages
        assert said(first) == [*expected, f"user:q{n}"]
        expected += one_run(n, len(first))
        assert llm.calls == asked + 2
        execution = await store.get_execution(f"chat-{n}")
        assert execution is not None and execution.thread == "chat"
        # What it continues is named, never copied.
        assert execution.input == {"text": f"q{n}", "after": f"chat-{n - 1}" if n > 1 else None}
        sizes.append(await payload_bytes(store, f"chat-{n}"))
    assert sizes[19] <= 2 * sizes[1], sizes  # each run journals what it added: linear in the thread
    assert said(llm.requests[-1].messages) == expected[:-1]

    # Each run keeps its own idempotency: running one again returns what it came to.
    again = await agent.run("q5", execution_id="chat-5", thread="chat")
    assert again.output == "answer after 20 messages"
    assert llm.calls == 40


async def test_the_base_is_the_last_completed_run(store: Store) -> None:
    def script(messages: list[Message]) -> Any:
        last = messages[-1]
        if isinstance(last, UserMessage) and last.content.startswith("refund"):
            return ToolCall("ask_manager", {"amount": 50_000})
        if isinstance(last, UserMessage) and last.content.startswith("loop"):
            return ToolCall("lookup", {"query": "again"})
        return f"answer {sum(isinstance(m, UserMessage) for m in messages)}"

    llm = ScriptedLLM(script)
    agent = bot(store, llm)
    assert (await agent.run("hello", execution_id="t-1", thread="t")).status == "completed"
    assert (await agent.run("refund please", execution_id="t-2", thread="t")).status == "paused"
    asked = llm.calls
    assert (await agent.run("still there?", execution_id="t-3", thread="t")).status == "completed"
    # A paused run is not continued: t-3 follows t-1.
    assert [m.content for m in llm.requests[asked].messages if isinstance(m, UserMessage)] == ["hello",
                                                                                               "still there?"]
    failing = bot(store, ScriptedLLM(script), max_turns=1)  # the same agent, with one turn a run
    failed = await failing.run("loop forever", execution_id="t-4", thread="t")
    assert failed.status == "failed"
    asked = llm.calls
    await agent.run("and now?", execution_id="t-5", thread="t")
    # Nor is a failed one: t-5 follows t-3.
    assert [m.content for m in llm.requests[asked].messages if isinstance(m, UserMessage)] == [
        "hello", "still there?", "and now?"]

    # The paused run, resumed, continues from what it started with (t-1), not from t-3 or t-5 ...
    asked = llm.calls
    done = await agent.resume("t-2", Resume(approved=True))
    assert done.status == "completed"
    assert [m.content for m in llm.requests[asked].messages if isinstance(m, UserMessage)] == ["hello",
                                                                                               "refund please"]
    # ... and, having completed last, is what the next run continues.
    await agent.run("what happened?", execution_id="t-6", thread="t")
    row = await store.get_execution("t-6")
    assert row is not None and row.input == {"text": "what happened?", "after": "t-2"}


async def test_a_crashed_run_recovered_keeps_its_base(store: Store) -> None:
    llm = ScriptedLLM(looks_up_then_answers)
    agent = bot(store, llm)
    await agent.run("q1", execution_id="c-1", thread="c")
    async with crash_at("turn:1") as point:  # dies once run 2's first reply (a tool call) is journaled
        await agent.run("q2", execution_id="c-2", thread="c")
    assert point.happened
    await agent.run("q3", execution_id="c-3", thread="c")  # completes meanwhile, continuing c-1

    asked = llm.calls
    done = await agent.resume("c-2")
    assert done.status == "completed"
    assert llm.calls == asked + 1  # turn 2 only: turn 1 was journaled
    # The recovered run still continues c-1, not c-3, which completed after it started.
    assert said(llm.requests[-1].messages) == ["system:Be brief.", *one_run(1, 2), "user:q2",
                                               "assistant:call(lookup)", "tool:found q2"]
    row = await store.get_execution("c-3")
    assert row is not None and row.input == {"text": "q3", "after": "c-1"}


async def test_a_detached_run_continues_what_was_last_when_it_was_started(store: Store) -> None:
    llm = ScriptedLLM(looks_up_then_answers)
    agent = bot(store, llm)
    await agent.run("q1", execution_id="d-1", thread="d")
    queued = await agent.start("q2", execution_id="d-2", thread="d")
    assert queued.status == "queued"
    await agent.run("q3", execution_id="d-3", thread="d")  # continues d-1: d-2 has not completed
    asked = llm.calls
    done = await agent.run("q2", execution_id="d-2", thread="d")  # taken up here, as a worker would
    assert done.status == "completed"
    assert [m.content for m in llm.requests[asked].messages if isinstance(m, UserMessage)] == ["q1", "q2"]


async def test_a_swarm_thread_continues_its_exchange(store: Store) -> None:
    seen: dict[str, list[list[Message]]] = {"a": [], "b": []}

    def first(messages: list[Message]) -> Any:
        seen["a"].append(messages)
        return ToolCall("handoff_to_b", {"message": "yours"})

    def second(messages: list[Message]) -> Any:
        seen["b"].append(messages)
        task = [m.content for m in messages if isinstance(m, UserMessage) and not m.content.startswith("Handoffs")]
        return f"answer to {task[-1]}"

    swarm = Swarm("pair", agents=[Agent("a", llm=ScriptedLLM(first)),
                                  Agent("b", llm=ScriptedLLM(second), system_prompt="You are b.")],
                  entrypoint="a", store=store)
    assert (await swarm.run("task 1", execution_id="s-1", thread="s")).output == "answer to task 1"
    assert (await swarm.run("task 2", execution_id="s-2", thread="s")).output == "answer to task 2"
    # Every member reads the thread's exchange before the task: each task and the swarm's answer.
    assert said(seen["a"][1]) == ["user:task 1", "assistant:answer to task 1", "user:task 2"]
    assert said(seen["b"][1])[:4] == ["system:You are b.", "user:task 1", "assistant:answer to task 1",
                                      "user:task 2"]
    assert said(seen["b"][0])[:2] == ["system:You are b.", "user:task 1"]  # the first run had none


async def test_a_supervisor_thread_continues_its_conversation(store: Store) -> None:
    def boss(messages: list[Message]) -> Any:
        last = messages[-1]
        if isinstance(last, UserMessage):
            return ToolCall("delegate_to_auditor", {"task": f"audit {last.content}"})
        assert isinstance(last, ToolMessage)
        return f"summary: {last.content}"

    worker_llm = ScriptedLLM(lambda messages: f"clean ({messages[-1].content})")
    llm = ScriptedLLM(boss)
    supervisor = Supervisor("office", llm=llm, store=store,
                            workers=[Worker(Agent("auditor", llm=worker_llm), "auditor")])
    assert (await supervisor.run("books", execution_id="o-1", thread="o")).output == "summary: clean (audit books)"
    asked = llm.calls
    assert (await supervisor.run("taxes", execution_id="o-2", thread="o")).status == "completed"
    # The supervisor's own loop continues: its delegation and the worker's answer included.
    assert said(llm.requests[asked].messages) == [
        "user:books", "assistant:call(delegate_to_auditor)", "tool:clean (audit books)",
        "assistant:summary: clean (audit books)", "user:taxes"]
    # The worker starts its task afresh.
    assert said(worker_llm.requests[-1].messages) == ["user:audit taxes"]


@pytest.mark.parametrize("thread", ["", "a\x00b", "x" * 513, "lone\ud800", 7])
async def test_a_bad_thread_name_is_refused_before_anything_is_written(store: Store, thread: Any) -> None:
    agent = bot(store, ScriptedLLM(looks_up_then_answers))
    with pytest.raises(ConfigurationError, match="thread name"):
        await agent.run("hi", execution_id="bad", thread=thread)
    with pytest.raises(ConfigurationError, match="thread name"):
        await agent.start("hi", execution_id="bad", thread=thread)
    assert await store.get_execution("bad") is None


async def test_an_existing_id_of_another_thread_is_refused_and_left_alone(store: Store) -> None:
    llm = ScriptedLLM(looks_up_then_answers)
    agent = bot(store, llm)
    await agent.run("q1", execution_id="x-1", thread="x")
    await agent.run("q1", execution_id="plain")
    before = [(e.execution_id, e.thread, e.status, e.updated_at) for e in await store.list_executions()]
    with pytest.raises(ConfigurationError, match=r"thread 'x'.*cannot be a run of thread 'y'"):
        await agent.run("q2", execution_id="x-1", thread="y")
    with pytest.raises(ConfigurationError, match=r"no thread.*cannot be a run of thread 'x'"):
        await agent.run("q2", execution_id="plain", thread="x")
    assert [(e.execution_id, e.thread, e.status, e.updated_at) for e in await store.list_executions()] == before
    assert await store.list_executions(thread="y") == []
    assert llm.calls == 4


async def test_the_runtime_keeps_an_execution_in_the_thread_it_started_in(store: Store) -> None:
    # A chain does not check its threads before it starts: the runtime's check is what holds.
    chain = Chain("tally", [lambda state: {"n": state.get("n", 0) + 1}], store=store)
    assert (await chain.run({}, execution_id="t-1", thread="t")).status == "completed"
    with pytest.raises(ConfigurationError, match=r"run of thread 't': it cannot be a run of thread 'u'"):
        await chain.run({}, execution_id="t-1", thread="u")
    [again] = await store.list_executions(thread="t")
    assert again.execution_id == "t-1" and again.status == "completed"
    assert await store.list_executions(thread="u") == []


async def test_another_runners_thread_is_refused(store: Store) -> None:
    await bot(store, ScriptedLLM(looks_up_then_answers)).run("q1", execution_id="m-1", thread="mine")
    other = Agent("other", llm=ScriptedLLM(["never"]), store=store)
    with pytest.raises(ConfigurationError, match="conversation of agent:bot, not of agent:other"):
        await other.run("q2", execution_id="m-2", thread="mine")
    assert await store.get_execution("m-2") is None


async def test_a_run_whose_base_is_gone_fails_and_says_so(store: Store) -> None:
    agent = bot(store, ScriptedLLM(looks_up_then_answers))
    await agent.run("q1", execution_id="g-1", thread="g")
    await agent.run("q2", execution_id="g-2", thread="g")
    assert await store.delete_execution("g-1")
    result = await agent.run("q3", execution_id="g-3", thread="g")
    assert result.status == "failed"
    assert result.error is not None and "ThreadBroken" in result.error and "'g-1'" in result.error


class Answer(BaseModel):
    value: int


async def test_a_correction_is_part_of_the_conversation_continued(store: Store) -> None:
    def script(messages: list[Message]) -> Any:
        last = messages[-1]
        if isinstance(last, UserMessage) and not last.content.startswith("Your answer"):
            return "not json"
        return '{"value": 1}'

    llm = ScriptedLLM(script)
    agent = Agent("typed", llm=llm, output_type=Answer, store=store)
    assert (await agent.run("one", execution_id="k-1", thread="k")).output == Answer(value=1)
    correction = llm.requests[1].messages[-1]
    asked = llm.calls
    await agent.run("two", execution_id="k-2", thread="k")
    assert llm.requests[asked].messages == [UserMessage(content="one"), AssistantMessage(content="not json"),
                                            correction, AssistantMessage(content='{"value": 1}'),
                                            UserMessage(content="two")]


async def test_a_streamed_run_continues_the_thread_too(store: Store) -> None:
    llm = ScriptedLLM(looks_up_then_answers)
    agent = bot(store, llm)
    await agent.run("q1", execution_id="v-1", thread="v")
    asked = llm.calls
    async with agent.stream("q2", execution_id="v-2", thread="v") as events:
        kinds = [event.type async for event in events]
    assert events.result is not None and events.result.status == "completed"
    assert "execution_completed" in kinds
    assert [m.content for m in llm.requests[asked].messages if isinstance(m, UserMessage)] == ["q1", "q2"]
