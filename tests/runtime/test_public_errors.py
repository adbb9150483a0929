"""What the public calls raise: tether's own errors, with messages, never a bare exception group."""

from __future__ import annotations

from typing import Any

import pytest
from tether.actors import Agent, Chain, FunctionTool, ScriptedLLM, Supervisor, ToolCall, Worker
from tether.runtime import Resume, interrupt
from tether.stores import ConfigurationError, ExecutionFinished, Lease, NewEntry, Store


async def first_write_fenced(store: Store, runner: Any, execution_id: str) -> None:
    """Run with the lease taken over by another process just before the run's first journal write."""
    append = store.append
    stolen = False

    async def append_after_a_takeover(lease: Lease, entries: list[NewEntry]) -> list[int]:
        nonlocal stolen
        if not stolen:
            stolen = True
            await store.acquire_lease(lease.execution_id, owner="elsewhere", lease_seconds=60, replacing=lease.owner)
        return await append(lease, entries)

    store.append = append_after_a_takeover  # type: ignore[method-assign]
    try:
        result = await runner.run("Investigate." if not isinstance(runner, Chain) else {}, execution_id=execution_id)
    finally:
        store.append = append  # type: ignore[method-assign]
    # The other process decides the outcome: this one says where the run stands, and raises nothing.
    assert result.status == "running"
    execution = await store.get_execution(execution_id)
    assert execution is not None and execution.lease_owner == "elsewhere"


def lookup(order: str) -> str:
    return f"order {order}"


def runners(store: Store) -> list[Any]:
    worker = Agent("researcher", llm=ScriptedLLM([ToolCall("lookup", {"order": "A"}), "found"]), tools=[lookup])
    return [
        Chain("line", [lambda s: {"a": 1}], store=store),
        Agent("clerk", llm=ScriptedLLM([ToolCall("lookup", {"order": "A"}), "done"]), tools=[lookup], store=store),
        Supervisor("boss", llm=ScriptedLLM([ToolCall("delegate_to_researcher", {"task": "t"}), "ok"]),
                   workers=[Worker(worker, "researcher")], store=store),
    ]


@pytest.mark.parametrize("which", [0, 1, 2], ids=["chain", "agent", "supervisor"])
async def test_a_run_fenced_out_at_its_first_write_raises_no_exception_group(db_store: Store, which: int) -> None:
    await first_write_fenced(db_store, runners(db_store)[which], f"fenced-{which}")


@pytest.mark.parametrize("name", ["", "a/b", "a\x00b", "tab\there", "line\nbreak", "lone\ud800"])
def test_runner_names_that_cannot_be_path_segments_are_refused_at_once(name: str) -> None:
    llm = ScriptedLLM(["x"])
    for build in (lambda: Chain(name), lambda: Agent(name, llm=llm),
                  lambda: Supervisor(name, llm=llm, workers=[]),
                  lambda: Supervisor("s", llm=llm, workers=[Worker(Agent("w", llm=llm), name)])):
        with pytest.raises(ConfigurationError, match="Cannot name"):
            build()
    chain = Chain("c")
    with pytest.raises(ConfigurationError, match="Cannot name"):
        chain.add_node(lambda s: {}, name=name or "\x00")


def test_an_empty_agent_name_no_longer_collides_with_agent_agent() -> None:
    with pytest.raises(ConfigurationError, match="non-empty"):
        Agent("", llm=ScriptedLLM(["x"]))
    assert Agent("agent", llm=ScriptedLLM(["x"])).root_path == "agent:agent"


async def test_resuming_a_cancelled_execution_says_it_was_cancelled(db_store: Store) -> None:
    def approve(state: dict[str, Any]) -> dict[str, Any]:
        first = interrupt("first_approval").approved
        return {"second": interrupt("second_approval").approved, "first": first}

    chain = Chain("twice", [approve], store=db_store)
    await chain.run({}, execution_id="c-1")
    assert (await chain.resume("c-1", Resume(approved=True))).status == "paused"  # asks the second
    from tether.runtime import Runtime

    async with Runtime(db_store) as rt:
        assert (await rt.cancel("c-1")).status == "cancelled"
    for path in (None, "chain:twice/node:approve"):
        with pytest.raises(ExecutionFinished, match="cancelled"):
            await chain.resume("c-1", Resume(approved=True), path=path)


def test_a_tool_named_like_a_path_is_refused() -> None:
    with pytest.raises(ConfigurationError):
        FunctionTool(lookup, name="a/b")
