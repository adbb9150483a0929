"""``tether demo``: the store's durable story, told in a few seconds.

An execution runs two steps, suspends for a manager's approval, is listed as
pending, is resumed by one approver and refused to a second, then completes.
Every step goes through the public `tether.stores` API, against a real store.
"""

from __future__ import annotations

import os
import time

import anyio
from tether.stores import (
    AlreadyResumed,
    NewEntry,
    NewExecution,
    NewInterrupt,
    Store,
    open_store,
)

_PATH = "chain:refund/node:approve_refund"


async def _story(store: Store, say: _Say) -> None:
    owner = f"demo-{os.getpid()}"
    execution_id = f"refund-{int(time.time() * 1000)}"
    started = await store.start_execution(
        NewExecution(execution_id=execution_id, runner="refund", root_path="chain:refund",
                     input={"amount": 50_000}),
        owner=owner, lease_seconds=30,
    )
    lease = started.lease
    assert lease is not None
    say(f"started {execution_id} (lease epoch {lease.epoch}, owner {owner})")

    await store.append(lease, [
        NewEntry(path="chain:refund/node:validate", label="node:validate", payload={"valid": True}),
    ])
    say("journaled node:validate")

    pending = await store.suspend(
        lease,
        [NewEntry(path=_PATH, label="node:approve_refund", kind="suspended",
                  payload={"state": {"amount": 50_000, "valid": True}})],
        NewInterrupt(path=_PATH, reason="manager_approval", context={"amount": 50_000}),
    )
    await store.release_lease(lease, status="paused")
    say(f"paused at {pending.agent_path} waiting for {pending.reason!r} {pending.context}")

    waiting = await store.list_pending(execution_id=execution_id)
    say(f"pending in this store: {[p.agent_path for p in waiting]}")

    decision = await store.claim(execution_id, {"approved": True, "metadata": {"approver": "alice"}},
                                 path=_PATH)
    say(f"alice claimed it: checkpoint #{decision.seq} {decision.payload}")
    try:
        await store.claim(execution_id, {"approved": False, "metadata": {"approver": "bob"}},
                          path=_PATH)
    except AlreadyResumed as exc:
        say(f"bob was too late: AlreadyResumed: {exc}")

    lease = await store.acquire_lease(execution_id, owner=owner, lease_seconds=30)
    await store.release_lease(
        lease, status="completed", result={"approved": True},
        entries=[NewEntry(path="chain:refund/node:charge", label="node:charge", payload={"charged": 50_000})],
    )
    execution = await store.get_execution(execution_id)
    assert execution is not None
    say(f"{execution_id} is {execution.status} with result {execution.result}")
    say("journal:")
    for entry in await store.read_journal(execution_id):
        say(f"  #{entry.seq:<2} {entry.kind:<9} {entry.label:<20} {entry.path}")


class _Say:
    def __init__(self) -> None:
        self.step = 0

    def __call__(self, text: str) -> None:
        if text.startswith("  "):
            print(text)
            return
        self.step += 1
        print(f"{self.step}. {text}")


def run_demo(url: str, *, backend: str = "asyncio") -> int:
    """Run the demo against the store at ``url``; return an exit code."""

    async def main() -> None:
        async with open_store(url) as store:
            await _story(store, _Say())

    print(f"tether demo on {url} under {backend}")
    anyio.run(main, backend=backend)
    return 0
