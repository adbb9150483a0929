"""A refund bot as a durable agent: its tool pauses for a manager, and survives the wait.

    python examples/refund_agent.py                 # runs, pauses in approve_refund, exits
    tether pending                                  # what waits: agent:refund-bot/tool:approve_refund
    tether resume refund-bot-1 --set approved=true --app examples.refund_agent:runners
    tether serve --app examples.refund_agent:runners   # ... or approve it at http://127.0.0.1:8765/approvals
    python examples/refund_agent.py --approve       # ... or a new process of this script resumes it
    python examples/refund_agent.py --reject        # ... or rejects it

Run the `tether` commands from the repository's root. The LLM is scripted (no
network, the same replies in every process). With --model, an OpenAI-compatible
endpoint answers instead (OPENAI_API_KEY, and --base-url for another provider or a
local server). The store is ``$TETHER_STORE``, else ``sqlite:///tether.db``;
``--store`` picks another, ``--backend trio`` runs it on trio.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
from typing import Any

import anyio
from tether.actors import LLM, Agent, OpenAIChatLLM, ScriptedLLM, ToolCall
from tether.runtime import AlreadyResumed, Resume, idempotent, interrupt
from tether.stores import Store, open_store

DEFAULT_STORE = "sqlite:///tether.db"


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


def scripted() -> ScriptedLLM:
    """Replies chosen from the conversation, so every process (and the CLI) gives the same ones."""

    def next_turn(messages: list[Any]) -> Any:
        task = next(m.content for m in messages if m.role == "user")
        amount = int(re.search(r"\$([\d,]+)", task).group(1).replace(",", ""))  # type: ignore[union-attr]
        last = messages[-1]
        if last.role == "user":
            return ToolCall("approve_refund", {"amount": amount})
        if last.name == "approve_refund":
            if json.loads(last.content)["approved"]:
                return ToolCall("issue_refund", {"amount": amount})
            return f"The ${amount:,} refund was declined by a manager."
        return f"Refund processed: {last.content}."

    return ScriptedLLM(next_turn)


def refund_bot(llm: LLM, store: Store | None = None) -> Agent:
    return Agent(
        name="refund-bot",
        system_prompt="You process refunds. Ask approve_refund first; issue the refund only if approved.",
        llm=llm,
        tools=[approve_refund, issue_refund],
        store=store,
    )


runners = [refund_bot(scripted())]
"""What ``--app examples.refund_agent:runners`` loads."""


async def main(args: argparse.Namespace) -> int:
    llm: LLM = (OpenAIChatLLM(args.model, base_url=args.base_url) if args.model else scripted())
    async with open_store(args.store) as store:
        agent = refund_bot(llm, store)
        if args.approve or args.reject:
            decision = Resume(approved=args.approve, metadata={"approver": args.approver})
            try:
                result = await agent.resume(args.execution_id, decision, by=f"script:{args.approver}")
            except AlreadyResumed as exc:
                print(f"Already decided: {exc}")
                return 2
        else:
            result = await agent.run(f"Process a ${args.amount:,} refund.", execution_id=args.execution_id)
    if result.status == "paused":
        pending = result.pending_interrupt
        assert pending is not None
        print(f"paused at {pending.agent_path}: {pending.reason} {json.dumps(pending.context)}")
        tether = "tether" if args.store == DEFAULT_STORE else f"tether --store {shlex.quote(args.store)}"
        print("decide it from any process:")
        print(f"   {tether} resume {shlex.quote(args.execution_id)} --set approved=true "
              f"--app examples.refund_agent:runners")
        print(f"   python {sys.argv[0]} --approve" + ("" if args.store == DEFAULT_STORE else f" --store {args.store}"))
    else:
        print(f"{result.status}: {result.output if result.status == 'completed' else result.error}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=os.environ.get("TETHER_STORE", DEFAULT_STORE))
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
