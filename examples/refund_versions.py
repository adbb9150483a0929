"""A deploy while a refund waits for approval: two versions, a migration, and patched().

    python examples/refund_versions.py              # the whole story, on a fresh SQLite file

Version 1 of the refund chain asks for approval in its ``approve`` node. Version 2
renamed that node ``sign_off`` and, for runs that reach it new, tells finance first
(``patched``). The story: a run pauses on v1; v2 is deployed beside it; a new run
starts on v2 while the old one would still continue on v1; v2 alone refuses the old
run, naming the change; a migration moves it to v2; both are approved and finish.

Keep the store to look at it afterwards (run from the repository's root):

    python examples/refund_versions.py --store sqlite:///versions.db
    tether show refund-old --store sqlite:///versions.db       # version 2, and its journal's migrated entry
    tether history refund-new --store sqlite:///versions.db    # the patched() answer, journaled

Runs of your own move the same way from the command line, with both versions loaded by
``--app examples.refund_versions:runners``: ``tether migrate ID --to 2 --app ... --dry-run``,
then without ``--dry-run`` (or ``--all --from 1 --to 2``).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from typing import Any

import anyio
from tether.actors import Chain
from tether.runtime import Migration, Resume, idempotent, interrupt, migrate, patched
from tether.stores import ConfigurationError, open_store


def validate(state: dict[str, Any]) -> dict[str, Any]:
    return {"valid": state["amount"] > 0}


def approve(state: dict[str, Any]) -> dict[str, Any]:
    return {"approved": interrupt("manager_approval", {"amount": state["amount"]}).approved}


@idempotent
def tell_finance(amount: int) -> str:
    print(f"   (finance told about ${amount:,})", flush=True)
    return "told"


def sign_off(state: dict[str, Any]) -> dict[str, Any]:
    # Runs that reach sign_off on version 2 tell finance first; a run that was already
    # waiting in approve when it moved over was asked without that, and keeps that path.
    told = patched("tell-finance-first")
    if told:
        tell_finance(state["amount"])
    return {"approved": interrupt("manager_approval", {"amount": state["amount"]}).approved,
            "finance_told": told}


def charge(state: dict[str, Any]) -> dict[str, Any]:
    return {"charged": state["amount"] if state["approved"] else 0}


refund_v1 = Chain("refund", [validate, approve, charge], version="1")
refund_v2 = Chain("refund", [validate, sign_off, charge], version="2")


@refund_v2.migrate(from_version="1")
def approve_became_sign_off(run: Migration) -> None:
    run.rename("node:approve", "node:sign_off")


runners = [refund_v1, refund_v2]
"""What ``--app examples.refund_versions:runners`` loads: both versions."""


async def story(url: str) -> dict[str, Any]:
    async with open_store(url) as store:
        for runner in runners:
            runner.store = store
        old = await refund_v1.run({"amount": 12_000}, execution_id="refund-old")
        print(f"1. refund-old paused on version 1 at {old.pending_interrupt.agent_path}")  # type: ignore[union-attr]

        new = await refund_v2.run({"amount": 800}, execution_id="refund-new")
        print(f"2. deployed version 2 beside it; refund-new started on version 2, paused at "
              f"{new.pending_interrupt.agent_path}")  # type: ignore[union-attr]

        try:
            await refund_v2.resume("refund-old", Resume(approved=True))
        except ConfigurationError as refused:
            print(f"3. version 2 alone refuses refund-old:\n   {refused}")

        preview = await migrate(store, "refund-old", refund_v2, dry_run=True)
        print(f"4. a dry run of the migration would change: {'; '.join(preview.changes)}")
        await migrate(store, "refund-old", refund_v2, by="example")
        execution = await store.get_execution("refund-old")
        print(f"5. migrated: refund-old is on version {execution.version}")  # type: ignore[union-attr]

        outputs = {}
        for execution_id in ("refund-old", "refund-new"):
            done = await refund_v2.resume(execution_id, Resume(approved=True), by="example")
            outputs[execution_id] = done.output
            print(f"6. {execution_id} {done.status}: {json.dumps(done.output)}")
        return outputs


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=os.environ.get("TETHER_VERSIONS_STORE"),
                        help="a store URL (default: a new SQLite file in a temporary directory)")
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        url = arguments.store or f"sqlite:///{scratch}/versions.db"
        anyio.run(story, url, backend=arguments.backend)
