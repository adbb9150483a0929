"""A planner that delegates: a researcher and an auditor work in parallel; the auditor's refund waits.

    python examples/planner_supervisor.py              # delegates to both; the auditor pauses
    tether pending                                     # supervisor:planner/worker:auditor/tool:approve_refund
    tether resume job-42 --set approved=true --app examples.planner_supervisor:runners
    tether serve --app examples.planner_supervisor:runners   # ... or decide it on the page
    python examples/planner_supervisor.py --approve    # ... or a new process of this script resumes it
    python examples/planner_supervisor.py --reject     # ... or refuses the refund

Run the `tether` commands from the repository's root. The planner's LLM is not
asked again on resume: its delegations are journaled, and the worker continues
from its own journal. The LLMs are scripted (no network), each reply chosen from
the conversation so every process answers alike; with --model an
OpenAI-compatible endpoint answers. The store is ``$TETHER_STORE``, else
``sqlite:///tether.db``; ``--store`` picks another, ``--backend trio`` runs it on trio.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from typing import Any

import anyio
from tether.actors import LLM, Agent, OpenAIChatLLM, ScriptedLLM, Supervisor, ToolCall, Worker
from tether.runtime import AlreadyResumed, Resume, idempotent, interrupt
from tether.stores import Store, open_store

DEFAULT_STORE = "sqlite:///tether.db"


def lookup_order(order: str) -> dict[str, Any]:
    """The order's amount and customer."""
    return {"order": order, "amount": 42_000, "customer": "ACME"}


@idempotent
def issue_refund(order: str, amount: int) -> str:
    print(f"   (refunding ${amount:,} for {order})", flush=True)
    return f"refunded ${amount:,}"


def approve_refund(order: str, amount: int) -> str:
    """Refund an order; above $10,000 a manager decides first."""
    if amount > 10_000 and not interrupt("manager_approval", {"order": order, "amount": amount}).approved:
        return "refund refused by the manager"
    return issue_refund(order, amount)


def _last_tool_result(messages: list[Any]) -> str:
    return str(next(m.content for m in reversed(messages) if m.role == "tool"))


def research(messages: list[Any]) -> Any:
    if messages[-1].role == "user":
        return ToolCall("lookup_order", {"order": "R-7"})
    found = json.loads(_last_tool_result(messages))
    return f"{found['order']}: ${found['amount']:,} for {found['customer']}."


def audit(messages: list[Any]) -> Any:
    if messages[-1].role == "user":
        return ToolCall("approve_refund", {"order": "R-7", "amount": 42_000})
    return f"R-7: {_last_tool_result(messages)}."  # what the tool did: refunded, or refused


def plan(messages: list[Any]) -> Any:
    if messages[-1].role == "user":
        return [ToolCall("delegate_to_researcher", {"task": "Look up order R-7."}),
                ToolCall("delegate_to_auditor", {"task": "Refund order R-7."})]
    found, audited = (m.content for m in messages if m.role == "tool")
    return f"Order {found} Refund: {audited}"


def scripted_or(model: str | None, base_url: str, script: Any) -> LLM:
    return OpenAIChatLLM(model, base_url=base_url) if model else ScriptedLLM(script)


def planner(store: Store | None = None, *, model: str | None = None,
            base_url: str = "https://api.openai.com/v1") -> Supervisor:
    researcher = Agent("researcher", system_prompt="Look orders up.", tools=[lookup_order],
                       llm=scripted_or(model, base_url, research))
    auditor = Agent("auditor", system_prompt="Process refunds.", tools=[approve_refund],
                    llm=scripted_or(model, base_url, audit))
    return Supervisor(
        "planner",
        system_prompt="Delegate research and refunds, then summarise.",
        llm=scripted_or(model, base_url, plan),
        workers=[Worker(researcher, "researcher", "Looks orders up."),
                 Worker(auditor, "auditor", "Processes refunds.")],
        store=store,
    )


runners = [planner()]
"""What ``--app examples.planner_supervisor:runners`` loads."""


async def main(args: argparse.Namespace) -> int:
    async with open_store(args.store) as store:
        boss = planner(store, model=args.model, base_url=args.base_url)
        if args.approve or args.reject:
            try:
                result = await boss.resume(args.execution_id, Resume(approved=args.approve), by="script")
            except AlreadyResumed as exc:
                print(f"Already decided: {exc}")
                return 2
        else:
            result = await boss.run("Handle the refund request for order R-7.", execution_id=args.execution_id)
    if result.status == "paused":
        pending = result.pending_interrupt
        assert pending is not None
        print(f"paused at {pending.agent_path}: {pending.reason} {json.dumps(pending.context)}")
        tether = "tether" if args.store == DEFAULT_STORE else f"tether --store {shlex.quote(args.store)}"
        print("decide it from any process:")
        print(f"   {tether} resume {shlex.quote(args.execution_id)} --set approved=true "
              f"--app examples.planner_supervisor:runners")
        print(f"   python {sys.argv[0]} --approve" + ("" if args.store == DEFAULT_STORE else f" --store {args.store}"))
    else:
        print(f"{result.status}: {result.output if result.status == 'completed' else result.error}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=os.environ.get("TETHER_STORE", DEFAULT_STORE))
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--execution-id", default="job-42")
    decision = parser.add_mutually_exclusive_group()
    decision.add_argument("--approve", action="store_true")
    decision.add_argument("--reject", action="store_true")
    parser.add_argument("--model", help="an OpenAI-compatible model instead of the scripts")
    parser.add_argument("--base-url", default="https://api.openai.com/v1")
    arguments = parser.parse_args()
    sys.exit(anyio.run(main, arguments, backend=arguments.backend))
