"""A process that runs one scenario's agent, for the SIGKILL tests (see _crash.py).

Usage: python _agent_child.py STORE_URL BACKEND SCENARIO MODE EXECUTION_ID [SCHEMA]

MODE: run | recover | resume (approves a pause). The scripted LLM writes ``llm<N>``
to the runs file when it is asked turn N; tools write their own names.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
from _child import run_child, say
from tether.actors import Agent, AssistantMessage, Message, ScriptedLLM, ToolCall
from tether.runtime import idempotent, interrupt
from tether.stores import Store

RUNS_FILE = os.environ["TETHER_TEST_RUNS"]
BLOCK = os.environ.get("TETHER_TEST_BLOCK", "")


def ran(name: str) -> None:
    """Record a run outside the store; block there if this visit is the one to kill in."""
    with open(RUNS_FILE, "a") as runs:
        runs.write(name + "\n")
        runs.flush()
        os.fsync(runs.fileno())
    with open(RUNS_FILE) as runs:
        visits = sum(1 for line in runs if line.strip() == name)
    if BLOCK == f"{name}:{visits}":
        say(f"in {name}")
        anyio.from_thread.run(anyio.sleep_forever)  # killed here


@idempotent
def page_manager(amount: int) -> str:
    ran("page")
    return "paged"


@idempotent
def charge_card(order: str, amount: int) -> str:
    ran("charge")
    return f"charged {order}"


def approve_refund(amount: int) -> dict[str, Any]:
    ran("approve_refund")
    page_manager(amount)
    return {"approved": interrupt("manager_approval", {"amount": amount}).approved}


def refund(order: str, amount: int) -> str:
    ran("refund")
    ran(f"refund-args-{order}-{amount}")
    receipt = charge_card(order, amount)
    ran("refunded")  # killed here: after the charge, before the result is journaled
    return receipt


def lookup(order: str) -> str:
    ran(f"lookup{order}")
    return f"order {order} found"


def slow(order: str) -> str:
    ran("slow")
    return f"{order} done"


SCRIPTS: dict[str, list[Any]] = {
    "approval": [ToolCall("approve_refund", {"amount": 50_000}), "Refund processed."],
    "tool": [ToolCall("refund", {"order": "A1", "amount": 70}), "Refunded."],
    "turn": [ToolCall("lookup", {"order": "A"}), "Found it."],
    "parallel": [[ToolCall("lookup", {"order": "A"}), ToolCall("slow", {"order": "S"}),
                  ToolCall("lookup", {"order": "B"})], "All done."],
}


def build(scenario: str, store: Store) -> tuple[Agent, ScriptedLLM]:
    script = SCRIPTS[scenario]

    class CountingLLM(ScriptedLLM):
        async def complete(self, messages: Sequence[Message], tools: Any) -> AssistantMessage:
            number = sum(1 for m in messages if isinstance(m, AssistantMessage)) + 1
            await anyio.to_thread.run_sync(ran, f"llm{number}")  # may block there to be killed
            return await super().complete(messages, tools)

    llm = CountingLLM(script)
    agent = Agent(name=scenario, llm=llm, tools=[approve_refund, refund, lookup, slow], store=store,
                  lease_seconds=60.0)
    return agent, llm


def with_calls(scenario: str, store: Store) -> tuple[Agent, Any]:
    agent, llm = build(scenario, store)
    return agent, lambda: {"llm_calls": llm.calls}


if __name__ == "__main__":
    run_child(with_calls, "Handle order A1.")
