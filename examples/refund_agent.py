"""The seed's refund bot as a durable agent: its tool pauses for a manager, and survives the wait.

    python examples/refund_agent.py                 # runs, pauses in approve_refund, exits
    python examples/refund_agent.py --approve       # a new process resumes it to the answer
    python examples/refund_agent.py --reject        # ... or rejects it

The LLM is scripted (no network, the same replies in every process). With
--model, an OpenAI-compatible endpoint answers instead (OPENAI_API_KEY, and
--base-url for another provider or a local server). Use --store for Postgres,
--backend trio for trio.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import anyio
from tether.actors import LLM, Agent, OpenAIChatLLM, ScriptedLLM, ToolCall
from tether.runtime import AlreadyResumed, Resume, idempotent, interrupt
from tether.stores import open_store


@idempotent
def page_manager(amount: int) -> str:
    # Before interrupt(), so it runs again when the tool is resumed: @idempotent makes
    # the page go out once.
    print(f"   (paging a manager about ${amount:,})")
    return "paged"


def approve_refund(amount: int) -> dict[str, Any]:
    """Approve a refund of `amount` dollars; above $10,000 a manager decides."""
    if amount > 10_000:
        page_manager(amount)
        decision = interrupt("manager_approval", {"amount": amount})
        return {"approved": decision.approved, "approver": decision.metadata.get("approver")}
    return {"approved": True, "approver": "policy"}


@idempotent
def issue_refund(amount: int) -> str:
    """Send the money back to the customer's card."""
    print(f"   (refunding ${amount:,})")
    return f"refund of ${amount:,} sent"


def scripted(amount: int) -> ScriptedLLM:
    def next_turn(messages: list[Any]) -> Any:
        last = messages[-1]
        if last.role == "user":
            return ToolCall("approve_refund", {"amount": amount})
        if last.name == "approve_refund":
            if json.loads(last.content)["approved"]:
                return ToolCall("issue_refund", {"amount": amount})
            return f"The ${amount:,} refund was declined by a manager."
        return f"Refund processed: {last.content}."

    return ScriptedLLM(next_turn)


async def main(args: argparse.Namespace) -> int:
    llm: LLM = (OpenAIChatLLM(args.model, base_url=args.base_url) if args.model else scripted(args.amount))
    async with open_store(args.store) as store:
        agent = Agent(
            name="refund-bot",
            system_prompt="You process refunds. Ask approve_refund first; issue the refund only if approved.",
            llm=llm,
            tools=[approve_refund, issue_refund],
            store=store,
        )
        if args.approve or args.reject:
            decision = Resume(approved=args.approve, metadata={"approver": args.approver})
            try:
                result = await agent.resume(args.execution_id, decision)
            except AlreadyResumed as exc:
                print(f"Already decided: {exc}")
                return 2
        else:
            result = await agent.run(f"Process a ${args.amount:,} refund.", execution_id=args.execution_id)
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
    parser.add_argument("--store", default="sqlite:///refunds.db")
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--execution-id", default="refund-bot-1")
    parser.add_argument("--amount", type=int, default=50_000)
    decision = parser.add_mutually_exclusive_group()
    decision.add_argument("--approve", action="store_true")
    decision.add_argument("--reject", action="store_true")
    parser.add_argument("--approver", default="alice")
    parser.add_argument("--model", help="an OpenAI-compatible model instead of the script")
    parser.add_argument("--base-url", default="https://api.openai.com/v1")
    arguments = parser.parse_args()
    sys.exit(anyio.run(main, arguments, backend=arguments.backend))
