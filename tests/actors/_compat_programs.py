"""The durability documentation's programs, as written for fastaiagent, with only their imports changed.

Each builder takes the checkpointer the program would have constructed (the tests
pass SQLiteCheckpointer(path) or PostgresCheckpointer(dsn, schema=...)); the LLMs
are scripted, the same replies in every process.

    python _compat_programs.py DATABASE [SCHEMA] --call PROGRAM EXECUTION_ID [--call ...] [--logs DIR]

makes each program's first, blocking call, in this process other than the one
that resumes it, and prints each result as a line of JSON, in the order given
(DATABASE: a SQLite file, or a postgresql:// DSN). One process makes them all,
so the tests pay for one Python start-up, not one per program. A ``five`` call
(five_nodes, logging to DIR/EXECUTION_ID.log) kills its process in its third
node: each runs in a child forked before any other call (one process, one
thread, no store open yet), and its line says how that child ended.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
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


def described(outcome: Any) -> dict[str, Any]:
    """A first call's result, as the script prints it."""
    pending = outcome.pending_interrupt
    return {"execution_id": outcome.execution_id, "status": outcome.status,
            "agent_path": pending["agent_path"] if pending else None,
            "attribute": pending.agent_path if pending else None,
            "node_id": pending["node_id"] if pending else None}


def crashed(execution_id: str, checkpointer: Any, logs: Path) -> dict[str, Any]:
    """five_nodes in a forked child, which SIGKILLs itself in n3; how the child ended (-9 for SIGKILL)."""
    pid = os.fork()
    if pid == 0:  # the child: run, and die in n3; any other end is an exit code the test shows
        try:
            five_nodes(checkpointer, logs / f"{execution_id}.log").execute({}, execution_id=execution_id)
        except BaseException:
            traceback.print_exc()
        sys.stderr.flush()
        os._exit(3)
    _, status = os.waitpid(pid, 0)
    returncode = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    return {"execution_id": execution_id, "returncode": returncode}


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("database")
    parser.add_argument("schema", nargs="?")
    parser.add_argument("--call", nargs=2, action="append", metavar=("PROGRAM", "EXECUTION_ID"), required=True)
    parser.add_argument("--logs", type=Path, help="where the five calls log their nodes")
    arguments = parser.parse_args()
    calls = [tuple(call) for call in arguments.call]
    # The forks first, while this process has one thread and has opened no database.
    outcomes = {run_id: crashed(run_id, checkpointer_for(arguments.database, arguments.schema), arguments.logs)
                for name, run_id in calls if name == "five"}
    for name, run_id in calls:
        if name != "five":
            store = checkpointer_for(arguments.database, arguments.schema)
            outcomes[run_id] = described(first_call(name, run_id, store))
    for _, run_id in calls:
        print(json.dumps(outcomes[run_id]), flush=True)
