"""What the telemetry tests trace: a supervisor whose two workers run at once, the auditor pausing for approval.

Run as ``python -m tests.telemetry._programs STORE_URL EXECUTION_ID BACKEND``: it
runs ``support`` to its pause (or to where ``TETHER_FAULTS`` kills it) and prints
the status. ``tether resume/recover --app tests.telemetry._programs:support``
continues it.
"""

from __future__ import annotations

import sys

import anyio
from tether.actors import Agent, ScriptedLLM, Supervisor, ToolCall, Worker
from tether.runtime import interrupt
from tether.stores import Store, open_store


def search(query: str) -> str:
    """Search the refund policy."""
    return f"3 results for {query}"


def approve_refund(amount: int) -> str:
    """Ask a manager to approve a refund."""
    return "approved" if interrupt("manager_approval", {"amount": amount}).approved else "refused"


def build(store: Store | None = None) -> Supervisor:
    researcher = Agent("researcher", llm=ScriptedLLM([ToolCall("search", {"query": "refunds"}), "3 sources"]),
                       tools=[search])
    auditor = Agent("auditor", llm=ScriptedLLM([ToolCall("approve_refund", {"amount": 50_000}), "Audit passed."]),
                    tools=[approve_refund])
    planner = ScriptedLLM([[ToolCall("delegate_to_researcher", {"task": "Find the policy."}),
                            ToolCall("delegate_to_auditor", {"task": "Audit refund R1."})], "R1 is fine."])
    return Supervisor("planner", llm=planner, workers=[Worker(researcher, "researcher"), Worker(auditor, "auditor")],
                      store=store)


support = build()


async def _run(url: str, execution_id: str) -> None:
    async with open_store(url) as store:
        result = await build(store).run("Check refund R1.", execution_id=execution_id)
        print(result.status, flush=True)


if __name__ == "__main__":
    anyio.run(_run, sys.argv[1], sys.argv[2], backend=sys.argv[3])
