"""The workflows the testing kit's own tests crash: one of each runner, with side effects.

Module-level runners (``tests.testing.flows:line``) are what a child process of
`crash_in_child` builds; `build` makes a fresh one of any kind on a given store.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tether.actors import Agent, Chain, ScriptedLLM, Supervisor, Swarm, ToolCall, Worker
from tether.runtime import idempotent, interrupt
from tether.stores import Store

FLOWS = ("line", "fanout", "route", "cycle", "approval", "agent", "swarm", "supervisor")
INPUTS: dict[str, Any] = {"agent": "go", "swarm": "go", "supervisor": "go"}


@idempotent
def effect(name: str) -> str:
    """The side effect every node and tool makes: counted by `Effects`, once per call site."""
    return f"did {name}"


def node(name: str, **update: Any) -> Any:
    def fn(state: dict[str, Any]) -> dict[str, Any]:
        effect(name)
        counts = dict(state.get("counts", {}))
        counts[name] = counts.get(name, 0) + 1
        return {"counts": counts, name: True, **update}

    fn.__name__ = name
    return fn


async def approve(state: dict[str, Any]) -> dict[str, Any]:
    return {"approved": interrupt("manager_approval", {"amount": 5}).approved}


def tool(name: str) -> Any:
    def fn(order: str) -> str:
        return effect(f"{name}:{order}")

    fn.__name__ = name
    return fn


def graph(chain: Chain, flow: str, node: Callable[[str], Any], *, loops: int) -> Chain:
    """The nodes and edges of a graph flow (the torture suite builds the same ones).

    ``fanout``: a -> {b, c} -> d; ``route``: a -> b (when x) or c, then d; ``cycle``:
    n1 -> n2 -> n1, that edge followed ``loops`` times.
    """
    for name in ("n1", "n2") if flow == "cycle" else ("a", "b", "c", "d"):
        chain.add_node(node(name))
    if flow == "fanout":
        for a, b in (("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")):
            chain.add_edge(a, b)
    elif flow == "route":
        chain.add_edge("a", "b", when=lambda s: s.get("x", True))
        chain.add_edge("a", "c", when=lambda s: not s.get("x", True))
        chain.add_edge("b", "d")
        chain.add_edge("c", "d")
    else:
        chain.add_edge("n1", "n2")
        chain.add_edge("n2", "n1", max_iterations=loops)
    return chain


def build(flow: str, store: Store | None) -> Any:
    """A fresh runner of the named flow (``FLOWS``) over ``store``."""
    if flow == "line":
        return Chain("line", [node(n) for n in ("n1", "n2", "n3", "n4")], store=store)
    if flow in ("fanout", "route", "cycle"):
        return graph(Chain(flow, store=store), flow, node, loops=2)
    if flow == "approval":
        return Chain("approval", [node("validate"), approve, node("charge")], store=store)
    if flow == "agent":
        llm = ScriptedLLM([[ToolCall("lookup", {"order": "A"}), ToolCall("charge", {"order": "A"})],
                           ToolCall("notify", {"order": "A"}), "done"])
        return Agent("agent", llm=llm, tools=[tool("lookup"), tool("charge"), tool("notify")], store=store)
    if flow == "swarm":
        return Swarm("swarm", agents=[
            Agent("a", llm=ScriptedLLM([ToolCall("work", {"order": "1"}), ToolCall("handoff_to_b", {"message": "m"})]),
                  tools=[tool("work")]),
            Agent("b", llm=ScriptedLLM([ToolCall("work", {"order": "2"}), "finished"]), tools=[tool("work")]),
        ], entrypoint="a", store=store)
    if flow == "supervisor":
        workers = [Worker(Agent(role, llm=ScriptedLLM([ToolCall("work", {"order": role}), f"{role} ok"]),
                                tools=[tool("work")]), role) for role in ("r1", "r2")]
        llm = ScriptedLLM([[ToolCall("delegate_to_r1", {"task": "t1"}), ToolCall("delegate_to_r2", {"task": "t2"})],
                           "all ok"])
        return Supervisor("boss", llm=llm, workers=workers, store=store)
    raise ValueError(f"unknown flow {flow!r}")


# For crash_in_child: the child sets the store.
line = build("line", None)
approval = build("approval", None)
agent = build("agent", None)
