"""Runners for the CLI operator tests: a supervisor that pauses at two paths in one round, and a
chain that can block inside a node (for a SIGKILL).

    --app tests.operator._two_pauses:runners

Run as a program (``python -m tests.operator._two_pauses URL EXECUTION_ID``), it starts a
``chain:slow`` execution, prints ``in block`` once inside its ``block`` node, and waits
there until it is killed. A process that is not that program runs the node straight through.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import anyio
from tether.actors import Agent, Chain, ScriptedLLM, Supervisor, ToolCall, Worker
from tether.runtime import interrupt
from tether.stores import open_store

AUDITOR = "supervisor:planner/worker:auditor/tool:approve_refund"
SECURITY = "supervisor:planner/worker:security/tool:freeze_account"
_blocking = threading.Event()  # set only in the program below: the one process that blocks


def approve_refund(amount: int) -> str:
    return "refund approved" if interrupt("manager_approval", {"amount": amount}).approved else "refused"


def freeze_account(account: str) -> str:
    return "frozen" if interrupt("security_approval", {"account": account}).approved else "left open"


def _worker(role: str, tool: Any, call: ToolCall) -> Worker:
    return Worker(Agent(role, llm=ScriptedLLM([call, f"{role} done"]), tools=[tool]), role)


planner = Supervisor(
    "planner",
    llm=ScriptedLLM([[ToolCall("delegate_to_auditor", {"task": "a"}),
                      ToolCall("delegate_to_security", {"task": "s"})], "both done"]),
    workers=[_worker("auditor", approve_refund, ToolCall("approve_refund", {"amount": 50_000})),
             _worker("security", freeze_account, ToolCall("freeze_account", {"account": "X-1"}))],
    lease_seconds=60.0,
)


def block(state: dict[str, Any]) -> dict[str, Any]:
    if _blocking.is_set():
        print("in block", flush=True)
        threading.Event().wait()  # until SIGKILL
    return {"blocked": False}


def finish(state: dict[str, Any]) -> dict[str, Any]:
    return {"finished": True}


slow = Chain("slow", [block, finish], lease_seconds=60.0)
runners = [planner, slow]


async def _run(url: str, execution_id: str) -> None:
    async with open_store(url) as store:
        slow.store = store
        await slow.run({}, execution_id=execution_id)


if __name__ == "__main__":
    _blocking.set()
    anyio.run(_run, sys.argv[1], sys.argv[2])
