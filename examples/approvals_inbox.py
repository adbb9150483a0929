"""An approvals inbox: list what waits for a human, and decide one.

    python examples/approvals_inbox.py [--store URL] [--backend asyncio|trio]
    python examples/approvals_inbox.py --approve EXECUTION_ID --path PATH --by alice
    python examples/approvals_inbox.py --reject EXECUTION_ID --path PATH --by bob --note "too much"

It talks to the store only, so it works from any process or machine that reaches
the same database, while the executions themselves are paused: the decision is
journaled now (the execution is then `decided`) and carried out by whichever
process continues the execution: `tether worker`, `tether recover ID --app ...`,
or an application running `serve_executions`. A second decision on the same
interrupt is refused with AlreadyResumed. It decides with the store's own claim,
which does not check the decision against the model a tool expects: the CLI and
the page do (they need the application's code for a custom decision model).
The store is ``$TETHER_STORE``, else ``sqlite:///tether.db``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime

import anyio
from tether.stores import AlreadyResumed, Store, StoreError, open_store


async def show_inbox(store: Store) -> None:
    """Print every pending interrupt, oldest first, with its full path and context."""
    pending = await store.list_pending(limit=50)
    if not pending:
        print("Nothing is waiting for a decision.")
    for item in pending:
        age = datetime.now(UTC) - item.created_at
        print(f"{item.execution_id}  {item.agent_path}")
        print(f"    {item.reason}, waiting {age.total_seconds():.0f}s: {json.dumps(item.context)}")


async def decide(store: Store, execution_id: str, path: str, approved: bool, by: str, note: str) -> int:
    """Claim one interrupt with a decision; return the exit code (2: someone was first)."""
    value = {"approved": approved, "metadata": {"approver": by, "note": note}}
    try:
        decision = await store.claim(execution_id, value, path=path, by=f"inbox:{by}")
    except AlreadyResumed as exc:
        print(f"Too late: {exc}")
        return 2
    except StoreError as exc:
        print(f"Cannot decide: {exc}")
        return 1
    verdict = "approved" if approved else "rejected"
    print(f"{verdict} {execution_id} at {path} (journal entry #{decision.seq})")
    return 0


async def main(args: argparse.Namespace) -> int:
    """Show the inbox, or decide one interrupt."""
    async with open_store(args.store) as store:
        target = args.approve or args.reject
        if target is None:
            await show_inbox(store)
            return 0
        return await decide(store, target, args.path, bool(args.approve), args.by, args.note)


def parse(argv: list[str]) -> argparse.Namespace:
    """Read the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=os.environ.get("TETHER_STORE", "sqlite:///tether.db"))
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    choice = parser.add_mutually_exclusive_group()
    choice.add_argument("--approve", metavar="EXECUTION_ID")
    choice.add_argument("--reject", metavar="EXECUTION_ID")
    parser.add_argument("--path", help="the interrupt's agent path (needed with --approve/--reject)")
    parser.add_argument("--by", default="someone")
    parser.add_argument("--note", default="")
    args = parser.parse_args(argv)
    if (args.approve or args.reject) and not args.path:
        parser.error("--path is required with --approve/--reject (see the inbox listing)")
    return args


if __name__ == "__main__":
    arguments = parse(sys.argv[1:])
    sys.exit(anyio.run(main, arguments, backend=arguments.backend))
