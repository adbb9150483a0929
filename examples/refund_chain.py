"""A refund flow as a durable chain: it pauses for a manager, and survives the wait.

    python examples/refund_chain.py                 # runs, pages a manager, pauses at approve_refund, exits
    tether pending                                  # what waits: chain:refund/node:approve_refund
    tether resume refund-abc --set approved=true --set metadata.approver=alice --app examples.refund_chain:runners
    tether serve --app examples.refund_chain:runners   # ... or approve it at http://127.0.0.1:8765/approvals
    python examples/refund_chain.py --approve       # ... or a new process of this script resumes it
    python examples/refund_chain.py --reject        # ... or rejects it
    tether history refund-abc                       # every boundary: what each node returned
    tether fork refund-abc --at node:validate --as refund-abc-2 --app examples.refund_chain:runners

Run the `tether` commands from the repository's root (so that `examples.refund_chain`
imports). The manager is paged once, whichever process resumes the run: the page is
`@idempotent`. A fork is a new run from a boundary of this one: it asks the manager
again (its side effects after that boundary are its own). Run the first command twice and the second run returns the same
paused result: the execution id is an idempotency key. The store is ``$TETHER_STORE``,
else ``sqlite:///tether.db`` (the CLI's default too); ``--store`` picks another
(``postgresql://...``), ``--backend trio`` runs it on trio.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from typing import Any

import anyio
from tether.actors import Chain
from tether.runtime import AlreadyResumed, Resume, idempotent, interrupt
from tether.stores import Store, open_store

DEFAULT_STORE = "sqlite:///tether.db"


def validate(state: dict[str, Any]) -> dict[str, Any]:
    if state["amount"] <= 0:
        raise ValueError("a refund is for a positive amount")
    return {"valid": True}


@idempotent
def page_manager(amount: int) -> str:
    # Before interrupt(), so it runs again when the node is resumed: @idempotent makes
    # the page go out once.
    print(f"   (paging a manager about ${amount:,})", flush=True)
    return "paged"


def approve_refund(state: dict[str, Any]) -> dict[str, Any]:
    if state["amount"] > 10_000:
        page_manager(state["amount"])
        decision = interrupt("manager_approval", {"amount": state["amount"]})
        return {"approved": decision.approved, "approver": decision.metadata.get("approver")}
    return {"approved": True, "approver": "policy"}


async def charge(state: dict[str, Any]) -> dict[str, Any]:
    return {"charged": state["amount"] if state["approved"] else 0}


def notify(state: dict[str, Any]) -> dict[str, Any]:
    verdict = "refunded" if state["charged"] else "refused"
    return {"message": f"${state['amount']:,} {verdict}"}


def refund_chain(store: Store | None = None) -> Chain:
    """The flow; examples/test_refund_chain.py tests it with tether's testing kit."""
    return Chain("refund", [validate, approve_refund, charge, notify], store=store)


runners = [refund_chain()]
"""What ``--app examples.refund_chain:runners`` loads: the CLI, ``tether serve`` and
``tether worker`` give it their store."""


async def main(args: argparse.Namespace) -> int:
    async with open_store(args.store) as store:
        chain = refund_chain(store)
        if args.approve or args.reject:
            decision = Resume(approved=args.approve, metadata={"approver": args.approver})
            try:
                result = await chain.resume(args.execution_id, decision, by=f"script:{args.approver}")
            except AlreadyResumed as exc:
                print(f"Already decided: {exc}")
                return 2
        else:
            result = await chain.run({"amount": args.amount}, execution_id=args.execution_id)
    if result.status == "paused":
        pending = result.pending_interrupt
        assert pending is not None
        print(f"paused at {pending.agent_path}: {pending.reason} {json.dumps(pending.context)}")
        tether = "tether" if args.store == DEFAULT_STORE else f"tether --store {shlex.quote(args.store)}"
        print("decide it from any process:")
        print(f"   {tether} resume {shlex.quote(args.execution_id)} --set approved=true "
              f"--app examples.refund_chain:runners")
        print(f"   python {sys.argv[0]} --approve" + ("" if args.store == DEFAULT_STORE else f" --store {args.store}"))
    else:
        print(f"{result.status}: {json.dumps(result.output)}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=os.environ.get("TETHER_STORE", DEFAULT_STORE))
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--execution-id", default="refund-abc")
    parser.add_argument("--amount", type=int, default=50_000)
    decision = parser.add_mutually_exclusive_group()
    decision.add_argument("--approve", action="store_true")
    decision.add_argument("--reject", action="store_true")
    parser.add_argument("--approver", default="alice")
    arguments = parser.parse_args()
    sys.exit(anyio.run(main, arguments, backend=arguments.backend))
