"""A process that runs, resumes or recovers one execution, for the crash tests.

Usage: python _execution_child.py STORE_URL BACKEND MODE EXECUTION_ID [SCHEMA]

MODE: run (a $50k refund: pauses), resume (approves), recover (no value),
run-stuck (a run whose auditor blocks until killed), effects (prints the count).
Side effects are counted in a file beside the database, outside the store.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio
from pydantic import BaseModel
from tether.runtime import Actor, AlreadyResumed, Resume, Runtime, Start, call_scope, idempotent, interrupt
from tether.stores import LeaseHeld, PostgresStore, Store, open_store

EFFECTS_FILE = os.environ["TETHER_TEST_EFFECTS"]


@idempotent
async def charge(amount: int) -> str:
    with open(EFFECTS_FILE, "a") as effects:
        effects.write(f"charge {amount}\n")
        effects.flush()
        os.fsync(effects.fileno())
    return f"charged {amount}"


class Audit(BaseModel):
    amount: int
    stuck: bool = False


class Auditor(Actor[BaseModel]):
    kind = "worker"
    messages = (Audit,)

    async def receive(self, message: Audit) -> Any:
        receipt = await charge(message.amount)
        if message.stuck and not os.environ.get("TETHER_TEST_RECOVERING"):
            print("stuck", flush=True)
            await anyio.sleep_forever()  # killed here
        with call_scope("tool:approve_refund"):
            decision = interrupt("manager_approval", {"amount": message.amount}) \
                if message.amount > 10_000 and not message.stuck else Resume(approved=True)
        return {"receipt": receipt, "approved": decision.approved}


class Planner(Actor[BaseModel]):
    kind = "supervisor"

    async def receive(self, message: Start) -> Any:
        request = message.input
        assert isinstance(request, dict)
        auditor = await self.context.spawn(Auditor, "auditor", durable=True)
        self.context.finish(await auditor.ask(Audit(**request)))


def show(result: Any) -> None:
    print(json.dumps(result.model_dump(mode="json")), flush=True)


async def main(url: str, mode: str, execution_id: str, schema: str | None) -> None:
    store: Store = PostgresStore(url, schema=schema) if schema else open_store(url)
    async with store, Runtime(store, lease_seconds=60.0) as rt:
        if mode == "run":
            show(await rt.run(Planner, {"amount": 50_000}, execution_id=execution_id, name="planner"))
        elif mode == "run-stuck":
            show(await rt.run(Planner, {"amount": 700, "stuck": True}, execution_id=execution_id,
                              name="planner"))
        elif mode == "resume":
            try:
                show(await rt.resume(Planner, execution_id, Resume(approved=True)))
            except AlreadyResumed:
                print(json.dumps({"status": "already_resumed"}), flush=True)
        elif mode == "recover":
            try:
                show(await rt.resume(Planner, execution_id))
            except LeaseHeld as held:  # a live holder: a killed one is taken over at once
                print(json.dumps({"status": "lease_held", "owner": held.owner}), flush=True)


if __name__ == "__main__":
    url, backend, mode, execution_id = sys.argv[1:5]
    anyio.run(main, url, mode, execution_id, sys.argv[5] if len(sys.argv) > 5 else None, backend=backend)
