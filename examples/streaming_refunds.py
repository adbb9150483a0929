"""A refund agent whose run you watch as it happens: tokens as they come, steps as they are journaled.

    python examples/streaming_refunds.py              # streams the run until it pauses for a manager
    tether watch refund-stream-1 --through-pauses     # another terminal: follow it from another process
    python examples/streaming_refunds.py --approve    # decide: this process carries on, and streams the rest

Every printed step carries its cursor, the journal position: a follower that
comes back later passes the last one it saw (``--after`` here, ``after=`` in
code, ``Last-Event-ID`` over HTTP) and gets every later step exactly once. The
tokens are live only: a follower in another process sees each whole reply once
it is journaled. The LLM is scripted (the same replies in every process). The
store is ``$TETHER_STORE``, else ``sqlite:///tether.db``; ``--store`` picks another,
``--backend trio`` runs it on trio.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import anyio
from tether.actors import Agent, ScriptedLLM, ToolCall
from tether.runtime import (
    Event,
    EventStream,
    ExecutionCompleted,
    ExecutionResumed,
    Interrupted,
    LLMTurn,
    Resume,
    TokenDelta,
    ToolResult,
    interrupt,
)
from tether.stores import Store, open_store

DEFAULT_STORE = "sqlite:///tether.db"


def approve_refund(amount: int) -> dict[str, Any]:
    """Approve a refund of `amount` dollars; above $10,000 a manager decides."""
    if amount > 10_000:
        decision = interrupt("manager_approval", {"amount": amount})
        return {"approved": decision.approved}
    return {"approved": True}


def issue_refund(amount: int) -> str:
    """Send the money back to the customer's card."""
    return f"refund of ${amount:,} sent"


def refund_agent(store: Store | None = None) -> Agent:
    llm = ScriptedLLM([
        ToolCall("approve_refund", {"amount": 50_000}),
        ToolCall("issue_refund", {"amount": 50_000}),
        ("The $50,000 refund was approved by a manager and sent back to the customer's card; "
         "it shows on their statement within five working days."),
    ])
    return Agent(name="refunds", system_prompt="Approve first, then refund.", llm=llm,
                 tools=[approve_refund, issue_refund], store=store)


runners = [refund_agent()]
"""What ``--app examples.streaming_refunds:runners`` loads."""


def show(event: Event, typing: bool) -> bool:
    """Print one event; whether a reply is being typed out on the current line."""
    if isinstance(event, TokenDelta):
        print(event.text, end="", flush=True)
        return True
    if typing:
        print()
    match event:
        case LLMTurn(message={"tool_calls": [*calls]}) if calls:
            detail = "asks for " + ", ".join(str(call["name"]) for call in calls if isinstance(call, dict))
        case ToolResult(result={"content": content}):
            detail = str(content)
        case Interrupted(call_path=path):
            detail = f"waits for a decision at {path}"
        case ExecutionResumed(value=value):
            detail = f"decided: {json.dumps(value)}"
        case ExecutionCompleted(output=output):
            detail = f"output: {output}"
        case _:
            detail = ""
    if event.cursor is not None:  # live starts are left out: the rows say what they did
        print(f"{event.cursor:>4}  {event.type:<20} {event.label:<24} {detail}")
    return False


async def follow(stream: EventStream) -> None:
    typing = False
    async for event in stream:
        typing = show(event, typing)


async def main(args: argparse.Namespace) -> int:
    async with open_store(args.store) as store:
        agent = refund_agent(store)
        if not args.approve:
            async with agent.stream("Refund order 7: $50,000.", execution_id=args.execution_id) as stream:
                await follow(stream)
            result = stream.result
        else:
            # Follow from where it paused while this process carries the decision out.
            journal = await store.read_journal(args.execution_id)
            async with agent.events(args.execution_id, after=journal[-1].seq) as stream, \
                    anyio.create_task_group() as tg:
                tg.start_soon(follow, stream)
                result = await agent.resume(args.execution_id, Resume(approved=True), by="script:manager")
    assert result is not None
    if result.status == "paused":
        print(f"paused: decide it with  python {sys.argv[0]} --approve"
              + ("" if args.store == DEFAULT_STORE else f" --store {args.store}"))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=os.environ.get("TETHER_STORE", DEFAULT_STORE))
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--execution-id", default="refund-stream-1")
    parser.add_argument("--approve", action="store_true")
    arguments = parser.parse_args()
    sys.exit(anyio.run(main, arguments, backend=arguments.backend))
