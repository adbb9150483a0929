"""A planner that delegates: a researcher and an auditor work in parallel; the auditor's refund waits.

    python examples/planner_supervisor.py              # delegates to both; the auditor pauses
    python examples/planner_supervisor.py --approve    # a new process resumes: the planner answers
    python examples/planner_supervisor.py --reject

The planner's LLM is not asked again on resume: its delegations are journaled,
and the worker continues from its own journal. The LLMs are scripted (no
network); with --model an OpenAI-compatible endpoint answers. Use --store for
Postgres, --backend trio for trio.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import anyio
from tether.actors import LLM, Agent, OpenAIChatLLM, ScriptedLLM, Supervisor, ToolCall, Worker
from tether.runtime import AlreadyResumed, Resume, idempotent, interrupt
from tether.stores import open_store


def lookup_order(order: str) -> dict[str, Any]:
    """The order's amount and customer."""
    return {"order": order, "amount": 42_000, "customer": "ACME"}


@idempotent
def issue_refund(order: str, amount: int) -> str:
    print(f"   (refunding ${amount:,} for {order})")
    return f"refunded ${amount:,}"


def approve_refund(order: str, amount: int) -> str:
    """Refund an order; above $10,000 a manager decides first."""
    if amount > 10_000 and not interrupt("manager_approval", {"order": order, "amount": amount}).approved:
        return "refund refused by the manager"
    return issue_refund(order, amount)


def scripted_or(args: argparse.Namespace, script: list[Any]) -> LLM:
    return OpenAIChatLLM(args.model, base_url=args.base_url) if args.model else ScriptedLLM(script)


def planner(args: argparse.Namespace, store: Any) -> Supervisor:
    researcher = Agent("researcher", system_prompt="Look orders up.", tools=[lookup_order],
                       llm=scripted_or(args, [ToolCall("lookup_order", {"order": "R-7"}),
                                              "R-7: $42,000 for ACME."]))
    auditor = Agent("auditor", system_prompt="Process refunds.", tools=[approve_refund],
                    llm=scripted_or(args, [ToolCall("approve_refund", {"order": "R-7", "amount": 42_000}),
                                           "R-7 handled."]))
    return Supervisor(
        "planner",
        system_prompt="Delegate research and refunds, then summarise.",
        llm=scripted_or(args, [
            [ToolCall("delegate_to_researcher", {"task": "Look up order R-7."}),
             ToolCall("delegate_to_auditor", {"task": "Refund order R-7."})],
            "Order R-7 ($42,000, ACME) was looked up and its refund handled.",
        ]),
        workers=[Worker(researcher, "researcher", "Looks orders up."),
                 Worker(auditor, "auditor", "Processes refunds.")],
        store=store,
    )


async def main(args: argparse.Namespace) -> int:
    async with open_store(args.store) as store:
        boss = planner(args, store)
        if args.approve or args.reject:
            try:
                result = await boss.resume(args.execution_id, Resume(approved=args.approve))
            except AlreadyResumed as exc:
                print(f"Already decided: {exc}")
                return 2
        else:
            result = await boss.run("Handle the refund request for order R-7.", execution_id=args.execution_id)
    if result.status == "paused":
        pending = result.pending_interrupt
        assert pending is not None
        print(f"paused at {pending.agent_path}: {pending.reason} {json.dumps(pending.context)}")
        print(f"resume it from any process: python {sys.argv[0]} --approve")
    else:
        print(f"{result.status}: {result.output if result.status == 'completed' else result.error}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="sqlite:///planner.db")
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--execution-id", default="job-42")
    decision = parser.add_mutually_exclusive_group()
    decision.add_argument("--approve", action="store_true")
    decision.add_argument("--reject", action="store_true")
    parser.add_argument("--model", help="an OpenAI-compatible model instead of the scripts")
    parser.add_argument("--base-url", default="https://api.openai.com/v1")
    arguments = parser.parse_args()
    sys.exit(anyio.run(main, arguments, backend=arguments.backend))
