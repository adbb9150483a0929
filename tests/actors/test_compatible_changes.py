"""A deploy between a pause and its resume: which changes a paused run survives, and which it refuses.

The journal holds results, not code: a run continues on a changed definition as
long as every node, tool, member and worker its journal names is still there.
"""

from __future__ import annotations

from typing import Any

import pytest
from tether.actors import Agent, Chain, FunctionTool, ScriptedLLM, Supervisor, Swarm, ToolCall, Worker
from tether.runtime import Resume, interrupt
from tether.stores import ConfigurationError, Store


def validate(state: dict[str, Any]) -> dict[str, Any]:
    return {"valid": True}


def approve(state: dict[str, Any]) -> dict[str, Any]:
    return {"approved": interrupt("manager_approval", {"amount": 5}).approved}


def charge(state: dict[str, Any]) -> dict[str, Any]:
    return {"charged": state["approved"]}


def charge_v2(state: dict[str, Any]) -> dict[str, Any]:
    return {"charged": state["approved"], "receipt": "r-1"}


def audit(state: dict[str, Any]) -> dict[str, Any]:
    return {"audited": True}


def chain_v1(store: Store) -> Chain:
    return Chain("refund", [validate, approve, charge], store=store)


def approve_refund(amount: int) -> str:
    return "approved" if interrupt("manager_approval", {"amount": amount}).approved else "refused"


def lookup(order: str) -> str:
    return f"order {order}"


def agent_v1(store: Store | None, *, tools: list[Any] | None = None, prompt: str = "You refund.") -> Agent:
    llm = ScriptedLLM([ToolCall("approve_refund", {"amount": 70}), "done"])
    return Agent("refunds", llm=llm, tools=tools or [approve_refund], system_prompt=prompt, store=store)


async def paused(runner: Any, execution_id: str, start: Any) -> None:
    result = await runner.run(start, execution_id=execution_id)
    assert result.status == "paused", result


@pytest.mark.parametrize("change", ["node added after", "function body", "edges after"])
async def test_a_paused_chain_resumes_on_a_compatible_change(store: Store, change: str) -> None:
    await paused(chain_v1(store), "c", {})
    after = {
        "node added after": lambda: Chain("refund", [validate, approve, charge, audit], store=store),
        "function body": lambda: Chain("refund", [validate, approve, FunctionNamed("charge", charge_v2)],
                                       store=store),
        "edges after": lambda: _edges_after(store),
    }[change]()
    # Names make the definition's hash; a function body is not in it.
    assert (after.fingerprint == chain_v1(store).fingerprint) == (change == "function body")
    result = await after.resume("c", Resume(approved=True))
    assert result.status == "completed" and result.output["charged"] is True


def FunctionNamed(name: str, fn: Any) -> Any:
    def node(state: dict[str, Any]) -> dict[str, Any]:
        return fn(state)  # type: ignore[no-any-return]

    node.__name__ = name
    return node


def _edges_after(store: Store) -> Chain:
    chain = Chain("refund", store=store)
    for fn in (validate, approve, charge, audit):
        chain.add_node(fn)
    chain.add_edge("validate", "approve")
    chain.add_edge("approve", "audit")  # the route after the pause changed
    chain.add_edge("audit", "charge")
    return chain


@pytest.mark.parametrize("change", ["tool added", "prompt changed", "model changed"])
async def test_a_paused_agent_resumes_on_a_compatible_change(store: Store, change: str) -> None:
    await paused(agent_v1(store), "a", "Refund order 42")
    if change == "tool added":
        after = agent_v1(store, tools=[approve_refund, lookup])
    elif change == "prompt changed":
        after = agent_v1(store, prompt="You refund, politely.")
    else:  # another LLM answers the turns to come; the turns before the pause are journaled
        after = Agent("refunds", llm=ScriptedLLM(lambda messages: "done by another model"),
                      tools=[approve_refund], system_prompt="You refund.", store=store)
    result = await after.resume("a", Resume(approved=True))
    assert result.status == "completed"
    assert result.output == ("done by another model" if change == "model changed" else "done")


async def test_a_paused_swarm_resumes_with_a_member_added(store: Store) -> None:
    def team(*extra: str) -> Swarm:
        agents = [Agent("a", llm=ScriptedLLM([ToolCall("approve_refund", {"amount": 1}), "ok"]),
                        tools=[approve_refund])]
        agents += [Agent(name, llm=ScriptedLLM(["never asked"])) for name in extra]
        return Swarm("team", agents=agents, entrypoint="a", store=store)

    await paused(team(), "w", "go")
    result = await team("b").resume("w", Resume(approved=True))
    assert result.status == "completed" and result.output == "ok"


async def test_removing_the_node_a_run_waits_in_is_refused_and_consumes_nothing(store: Store) -> None:
    await paused(chain_v1(store), "c", {})
    renamed = Chain("refund", [validate, FunctionNamed("approve_v2", approve), charge], store=store)
    with pytest.raises(ConfigurationError, match=r"node 'approve' \(chain:refund/node:approve\).*removed or renamed"):
        await renamed.resume("c", Resume(approved=True))
    assert len(await store.list_pending(execution_id="c")) == 1
    assert (await chain_v1(store).resume("c", Resume(approved=True))).status == "completed"


async def test_removing_a_node_the_run_passed_is_refused(store: Store) -> None:
    await paused(chain_v1(store), "c", {})
    with pytest.raises(ConfigurationError, match="node 'validate'"):
        await Chain("refund", [approve, charge], store=store).resume("c", Resume(approved=True))


async def test_removing_the_tool_a_run_waits_in_is_refused(store: Store) -> None:
    await paused(agent_v1(store), "a", "Refund order 42")
    other = FunctionTool(lookup, name="approve_refund_v2")
    with pytest.raises(ConfigurationError, match=r"tool 'approve_refund'"):
        await agent_v1(store, tools=[other]).resume("a", Resume(approved=True))
    assert len(await store.list_pending(execution_id="a")) == 1


async def test_renaming_a_worker_or_a_member_is_refused(store: Store) -> None:
    def boss(roles: tuple[str, str]) -> Supervisor:
        workers = [Worker(agent_v1(None), roles[0]), Worker(Agent("x", llm=ScriptedLLM(["x"])), roles[1])]
        llm = ScriptedLLM([ToolCall(f"delegate_to_{roles[0]}", {"task": "refund 42"}), "all done"])
        return Supervisor("boss", llm=llm, workers=workers, store=store)

    await paused(boss(("refunder", "other")), "s", "go")
    with pytest.raises(ConfigurationError, match=r"worker 'refunder'"):
        await boss(("refunds", "other")).resume("s", Resume(approved=True))
    assert (await boss(("refunder", "helper")).resume("s", Resume(approved=True))).status == "completed"

    def team(name: str) -> Swarm:
        return Swarm("team", agents=[Agent(name, llm=ScriptedLLM([ToolCall("approve_refund", {"amount": 1}), "ok"]),
                                           tools=[approve_refund])], entrypoint=name, store=store)

    await paused(team("a"), "w", "go")
    with pytest.raises(ConfigurationError, match=r"agent 'a'"):
        await team("b").resume("w", Resume(approved=True))


@pytest.mark.parametrize("order", [["validate", "charge", "approve"], ["audit", "validate", "approve", "charge"]],
                         ids=["reordered", "node added before"])
async def test_a_route_changed_before_the_pause_is_refused(store: Store, order: list[str]) -> None:
    # Replayed on the new route, a node would run before one the run already went through.
    await paused(chain_v1(store), "c", {})
    nodes = {"validate": validate, "approve": approve, "charge": charge, "audit": audit}
    with pytest.raises(ConfigurationError, match=r"no longer reaches"):
        await Chain("refund", [nodes[n] for n in order], store=store).resume("c", Resume(approved=False))
    assert len(await store.list_pending(execution_id="c")) == 1


async def test_a_tool_called_twice_in_one_turn_does_not_stop_a_compatible_change(store: Store) -> None:
    def agent(tools: list[Any]) -> Agent:
        llm = ScriptedLLM([[ToolCall("lookup", {"order": "A"}), ToolCall("lookup", {"order": "B"})],
                           ToolCall("approve_refund", {"amount": 70}), "done"])
        return Agent("refunds", llm=llm, tools=tools, store=store)

    await paused(agent([lookup, approve_refund]), "a", "Refund A and B")
    journal = [e.label for e in await store.read_journal("a")]
    assert "turn:1/tool:lookup[0]" in journal  # numbered by its place in the turn
    result = await agent([lookup, approve_refund, charge_tool]).resume("a", Resume(approved=True))
    assert result.status == "completed"


def charge_tool(order: str) -> str:
    return f"charged {order}"


async def test_a_finished_tool_call_is_answered_from_the_journal_after_its_tool_is_gone(store: Store) -> None:
    llm = ScriptedLLM([ToolCall("lookup", {"order": "A"}), ToolCall("approve_refund", {"amount": 70}), "done"])
    await paused(Agent("refunds", llm=llm, tools=[lookup, approve_refund], store=store), "a", "Refund A")
    without = Agent("refunds", llm=llm, tools=[approve_refund], store=store)
    assert (await without.resume("a", Resume(approved=True))).status == "completed"
