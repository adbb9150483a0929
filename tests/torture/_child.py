"""One torture process: run or recover one scenario, with whatever faults TETHER_FAULTS arms.

Usage: python -m tests.torture._child STORE_URL BACKEND SCENARIO MODE EXECUTION_ID EFFECTS_DB [SCHEMA]

MODE: run | recover | approve. Prints the result as JSON, with the number of
journal writes this process made. Every node and tool calls an @idempotent
side effect that records (idempotency key, name) in EFFECTS_DB and counts its
attempts there, outside the store.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from typing import Any

import anyio
from tether.actors import Agent, Chain, ScriptedLLM, Supervisor, Swarm, ToolCall, Worker
from tether.runtime import AlreadyResumed, Resume, idempotency_key, idempotent, interrupt
from tether.runtime._core import hooks
from tether.stores import PostgresStore, Store, open_store

from tests.testing.flows import graph

EFFECTS = ""


@idempotent
def effect(name: str) -> str:
    with sqlite3.connect(EFFECTS, timeout=30) as db:
        db.execute("INSERT INTO attempts (name) VALUES (?)", (name,))
        db.execute("INSERT OR IGNORE INTO effects (key, name) VALUES (?, ?)", (idempotency_key(), name))
    return f"did {name}"


def node(name: str, **update: Any) -> Any:
    def fn(state: dict[str, Any]) -> dict[str, Any]:
        effect(name)
        counts = dict(state.get("counts", {}))
        counts[name] = counts.get(name, 0) + 1
        return {"counts": counts, name: True, **update}

    fn.__name__ = name
    return fn


def approve(state: dict[str, Any]) -> dict[str, Any]:
    effect("approve")
    return {"approved": interrupt("manager_approval", {"amount": 5}).approved}


def tool(name: str) -> Any:
    def fn(order: str) -> str:
        return effect(f"{name}:{order}")

    fn.__name__ = name
    return fn


def build(scenario: str, store: Store) -> Any:
    if scenario == "line":
        return Chain("line", [node(n) for n in ("n1", "n2", "n3", "n4", "n5")], store=store, lease_seconds=60.0)
    if scenario in ("fanout", "route", "cycle"):
        return graph(Chain(scenario, store=store, lease_seconds=60.0), scenario, node, loops=3)
    if scenario == "approval":
        return Chain("approval", [node("validate"), approve, node("charge")], store=store, lease_seconds=60.0)
    if scenario == "agent":
        llm = ScriptedLLM([[ToolCall("lookup", {"order": "A"}), ToolCall("charge", {"order": "A"}),
                            ToolCall("lookup", {"order": "B"})], ToolCall("notify", {"order": "A"}), "done"])
        return Agent("agent", llm=llm, tools=[tool("lookup"), tool("charge"), tool("notify")], store=store,
                     lease_seconds=60.0)
    if scenario == "swarm":
        return Swarm("swarm", agents=[
            Agent("a", llm=ScriptedLLM([ToolCall("work", {"order": "1"}), ToolCall("handoff_to_b", {"message": "m"})]),
                  tools=[tool("work")]),
            Agent("b", llm=ScriptedLLM([ToolCall("work", {"order": "2"}), "finished"]), tools=[tool("work")]),
        ], entrypoint="a", store=store, lease_seconds=60.0)
    if scenario == "supervisor":
        workers = [Worker(Agent(role, llm=ScriptedLLM([ToolCall("work", {"order": role}), f"{role} ok"]),
                                tools=[tool("work")]), role) for role in ("r1", "r2")]
        llm = ScriptedLLM([[ToolCall("delegate_to_r1", {"task": "t1"}), ToolCall("delegate_to_r2", {"task": "t2"})],
                           "all ok"])
        return Supervisor("boss", llm=llm, workers=workers, store=store, lease_seconds=60.0)
    raise SystemExit(f"unknown scenario {scenario}")


INPUTS: dict[str, Any] = {"agent": "go", "swarm": "go", "supervisor": "go"}


async def main(url: str, scenario: str, mode: str, execution_id: str, schema: str | None) -> None:
    store: Store = PostgresStore(url, schema=schema) if schema else open_store(url)
    async with store:
        runner = build(scenario, store)
        if mode == "run":
            result = await runner.run(INPUTS.get(scenario, {}), execution_id=execution_id)
        elif mode == "approve":
            try:
                result = await runner.resume(execution_id, Resume(approved=True))
            except AlreadyResumed:  # decided by an earlier, killed process: carry it out
                result = await recover(runner, execution_id)
        else:
            result = await recover(runner, execution_id)
    print(json.dumps({**result.model_dump(mode="json"), "writes": hooks.installed().faults.writes}), flush=True)


async def recover(runner: Any, execution_id: str) -> Any:
    # At once: the killed process is seen dead on this machine, its lease taken over.
    return await runner.resume(execution_id)


if __name__ == "__main__":
    url, backend, scenario, mode, execution_id, EFFECTS = sys.argv[1:7]
    os.environ.setdefault("TETHER_FAULTS", "")
    anyio.run(main, url, scenario, mode, execution_id, sys.argv[7] if len(sys.argv) > 7 else None, backend=backend)
