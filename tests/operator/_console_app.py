"""A planner whose auditor's refund waits, beside the refund chain: two trees to scope tokens over.

Loaded with ``--app tests.operator._console_app:runners``; ``python -m
tests.operator._console_app STORE_URL ID`` runs one planner to its pause.
"""

from __future__ import annotations

import sys
from typing import Any

import anyio
from tether.actors import Agent, ScriptedLLM, Supervisor, ToolCall, Worker
from tether.runtime import interrupt
from tether.stores import open_store

from ._flows import refund

PLANNER_PATH = "supervisor:planner/worker:auditor/tool:approve_refund"


def approve_refund(order: str, amount: int) -> str:
    """Refund an order once a manager agrees."""
    decision = interrupt("manager_approval", {"order": order, "amount": amount})
    return "refunded" if decision.approved else "refused"


def _audit(messages: list[Any]) -> Any:
    if messages[-1].role == "user":
        return ToolCall("approve_refund", {"order": messages[-1].content, "amount": 42_000})
    return f"audited: {messages[-1].content}"


def _plan(messages: list[Any]) -> Any:
    if messages[-1].role == "user":
        return ToolCall("delegate_to_auditor", {"task": messages[-1].content})
    return f"done: {messages[-1].content}"


auditor = Agent("auditor", system_prompt="Refunds.", tools=[approve_refund], llm=ScriptedLLM(_audit))
planner = Supervisor("planner", system_prompt="Delegate.", llm=ScriptedLLM(_plan),
                     workers=[Worker(auditor, "auditor", "Processes refunds.")])
runners = [planner, refund]


async def start_planner(url: str, execution_id: str, order: str = "R-7") -> None:
    """One planner run to its pause at `PLANNER_PATH`."""
    async with open_store(url) as store:
        planner.store = store
        result = await planner.run(order, execution_id=execution_id)
        assert result.status == "paused", result


if __name__ == "__main__":
    anyio.run(start_planner, sys.argv[1], sys.argv[2])
