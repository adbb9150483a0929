"""The durability documentation's programs, as written for fastaiagent, with only their imports changed.

Each builder takes the checkpointer the program would have constructed (the tests
pass SQLiteCheckpointer(path) or PostgresCheckpointer(dsn, schema=...)); the LLMs
are scripted, the same replies in every process.

    python _compat_programs.py PROGRAM EXECUTION_ID DATABASE [SCHEMA]

runs a program's first, blocking call in a process of its own and prints its
result as JSON (DATABASE: a SQLite file, or a postgresql:// DSN).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from tether.actors import ScriptedLLM, ToolCall
from tether.actors.compat import (
    Agent,
    Chain,
    FunctionTool,
    PostgresCheckpointer,
    Resume,
    SQLiteCheckpointer,
    Supervisor,
    Swarm,
    Worker,
    idempotent,
    interrupt,
)

__all__ = ("Resume",)  # the tests resume with it, as the programs do


def refund_agent(checkpointer: Any) -> Agent:
    def approve_refund(amount: int):  # type: ignore[no-untyped-def]
        if amount > 10_000:
            d = interrupt(reason="manager_approval", context={"amount": amount})
            return {"approved": d.approved}
        return {"approved": True}

    agent = Agent(
        name="refund-bot",
        system_prompt="You process refunds.",
        llm=ScriptedLLM([ToolCall("approve_refund", {"amount": 50_000}), "Refund processed."]),
        tools=[FunctionTool(name="approve_refund", fn=approve_refund)],
        checkpointer=checkpointer,
    )
    return agent


def content_swarm(checkpointer: Any) -> Swarm:
    def approve_publish(title: str):  # type: ignore[no-untyped-def]
        d = interrupt(reason="publish_approval", context={"title": title})
        return {"approved": d.approved}

    researcher = Agent(name="researcher", llm=ScriptedLLM([ToolCall("handoff_to_analyst", {"message": "3 sources"})]))
    analyst = Agent(name="analyst", tools=[FunctionTool(name="approve_publish", fn=approve_publish)],
                    llm=ScriptedLLM([ToolCall("approve_publish", {"title": "Findings"}),
                                     ToolCall("handoff_to_reporter", {"message": "approved"})]))
    reporter = Agent(name="reporter", llm=ScriptedLLM(["Report: the findings, approved for publishing."]))

    swarm = Swarm(
        name="content_team",
        agents=[researcher, analyst, reporter],
        entrypoint="researcher",
        handoffs={"researcher": ["analyst"], "analyst": ["reporter"], "reporter": []},
        checkpointer=checkpointer,
    )
    return swarm


def planner_supervisor(checkpointer: Any) -> Supervisor:
    def approve_refund(amount: int):  # type: ignore[no-untyped-def]
        d = interrupt(reason="manager_approval", context={"amount": amount})
        return {"approved": d.approved}

    planner = Supervisor(
        name="planner",
        llm=ScriptedLLM([ToolCall("delegate_to_researcher", {"task": "Find the order."}),
                         ToolCall("delegate_to_auditor", {"task": "Audit the $50k refund."}),
                         "Investigated and reported."]),
        workers=[
            Worker(agent=Agent(name="researcher", llm=ScriptedLLM(["Order 7, $50,000."])), role="researcher",
                   description="Looks things up."),
            Worker(agent=Agent(name="auditor", tools=[FunctionTool(name="approve_refund", fn=approve_refund)],
                               llm=ScriptedLLM([ToolCall("approve_refund", {"amount": 50_000}), "Audited."])),
                   role="auditor", description="Checks refunds."),
        ],
        checkpointer=checkpointer,
    )
    return planner


def refund_chain(checkpointer: Any) -> Chain:
    def approve_refund(state):  # type: ignore[no-untyped-def]
        if state["amount"] > 10_000:
            decision = interrupt(
                reason="manager_approval",
                context={"amount": state["amount"]},
            )
            return {"approved": decision.approved}
        return {"approved": True}

    @idempotent
    def charge(state):  # type: ignore[no-untyped-def]
        return {"charged": state["approved"]}

    chain = Chain("refund", checkpointer=checkpointer)
    chain.add_node("approve", tool=FunctionTool(name="approve_refund", fn=approve_refund))
    chain.add_node("charge", charge)
    chain.connect("approve", "charge")
    return chain


def five_nodes(checkpointer: Any, log: Path) -> Chain:
    """Five nodes that log each run; the third kills its process the first time (SIGKILL)."""

    def step(name: str) -> Any:
        def node(state: dict[str, Any]) -> dict[str, Any]:
            with log.open("a") as f:
                f.write(name + "\n")
            if name == "n3" and log.read_text().count("n3") == 1:
                os.kill(os.getpid(), signal.SIGKILL)
            return {"done": [*state.get("done", []), name]}

        return node

    chain = Chain("five", checkpointer=checkpointer)
    for n in range(1, 6):
        chain.add_node(f"n{n}", step(f"n{n}"))
    for n in range(1, 5):
        chain.connect(f"n{n}", f"n{n + 1}")
    return chain


def checkpointer_for(database: str, schema: str | None = None) -> Any:
    if database.startswith("postgresql://"):
        return PostgresCheckpointer(database, schema=schema)
    return SQLiteCheckpointer(database)


def first_call(program: str, execution_id: str, checkpointer: Any) -> Any:
    """The program's first call, blocking, as each program makes it."""
    if program == "agent":
        return refund_agent(checkpointer).run("Process a $50k refund.", execution_id=execution_id)
    if program == "swarm":
        return content_swarm(checkpointer).run("Investigate the topic.", execution_id=execution_id)
    if program == "supervisor":
        return planner_supervisor(checkpointer).run("Investigate and report.", execution_id=execution_id)
    if program == "chain":
        return refund_chain(checkpointer).execute({"amount": 50_000}, execution_id=execution_id)
    raise SystemExit(f"no program {program!r}")


if __name__ == "__main__":
    name, run_id, database, *rest = sys.argv[1:]
    store = checkpointer_for(database, *rest)
    if name == "five":
        outcome = five_nodes(store, Path(os.environ["FIVE_LOG"])).execute({}, execution_id=run_id)
    else:
        outcome = first_call(name, run_id, store)
    pending = outcome.pending_interrupt
    print(json.dumps({"status": outcome.status, "agent_path": pending["agent_path"] if pending else None,
                      "attribute": pending.agent_path if pending else None,
                      "node_id": pending["node_id"] if pending else None}))
