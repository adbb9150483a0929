"""A process that runs one scenario's chain, for the SIGKILL tests.

Usage: python _chain_child.py STORE_URL BACKEND SCENARIO MODE EXECUTION_ID [SCHEMA]

MODE: run | recover | resume (approves a pause). With TETHER_TEST_BLOCK=<node>:<visit>,
that visit of that node prints "in <node>" and blocks until the process is killed.
Every node run is appended to TETHER_TEST_RUNS (outside the store), fsynced.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime
from typing import Any

import anyio
from tether.actors import Chain
from tether.runtime import AlreadyResumed, Resume, interrupt
from tether.stores import LeaseHeld, PostgresStore, Store, open_store

RUNS_FILE = os.environ["TETHER_TEST_RUNS"]
BLOCK = os.environ.get("TETHER_TEST_BLOCK", "")


def visits(name: str) -> int:
    with open(RUNS_FILE) as runs:
        return sum(1 for line in runs if line.strip() == name)


def node(name: str, **update: Any) -> Any:
    def fn(state: Any) -> dict[str, Any]:
        with open(RUNS_FILE, "a") as runs:
            runs.write(name + "\n")
            runs.flush()
            os.fsync(runs.fileno())
        if BLOCK == f"{name}:{visits(name)}":
            print(f"in {name}", flush=True)
            anyio.from_thread.run(anyio.sleep_forever)  # killed here
        counts = dict(state.get("counts", {}))
        counts[name] = counts.get(name, 0) + 1
        return {"counts": counts, name: True, **update}

    fn.__name__ = name
    return fn


def approve(state: Any) -> dict[str, Any]:
    decision = interrupt("manager_approval", {"amount": state["amount"]})
    return {"approved": decision.approved}


def build(scenario: str, store: Store) -> Chain:
    chain = Chain(scenario, store=store, lease_seconds=1.0)
    if scenario == "line":
        for name in ("n1", "n2", "n3", "n4", "n5"):
            chain.add_node(node(name))
        for a, b in (("n1", "n2"), ("n2", "n3"), ("n3", "n4"), ("n4", "n5")):
            chain.add_edge(a, b)
    elif scenario == "fanout":
        for name in ("a", "b", "c", "d"):
            chain.add_node(node(name))
        for a, b in (("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")):
            chain.add_edge(a, b)
    elif scenario == "route":
        for name in ("a", "b", "c", "d"):
            chain.add_node(node(name))
        chain.add_edge("a", "b", when=lambda s: s["x"])
        chain.add_edge("a", "c", when=lambda s: not s["x"])
        chain.add_edge("b", "d")
        chain.add_edge("c", "d")
    elif scenario == "cycle":
        chain.add_node(node("n1"))
        chain.add_node(node("n2"))
        chain.add_edge("n1", "n2")
        chain.add_edge("n2", "n1", max_iterations=3)
    elif scenario == "approval":
        chain.add_node(node("validate"))
        chain.add_node(approve)
        chain.add_node(node("charge"))
        chain.add_edge("validate", "approve")
        chain.add_edge("approve", "charge")
    return chain


def show(result: Any) -> None:
    print(json.dumps(result.model_dump(mode="json")), flush=True)


async def main(url: str, scenario: str, mode: str, execution_id: str, schema: str | None) -> None:
    store: Store = PostgresStore(url, schema=schema) if schema else open_store(url)
    async with store:
        chain = build(scenario, store)
        if mode == "run":
            show(await chain.run({"x": True, "amount": 50_000}, execution_id=execution_id))
        elif mode == "resume":
            try:
                show(await chain.resume(execution_id, Resume(approved=True)))
            except AlreadyResumed:
                print(json.dumps({"status": "already_resumed"}), flush=True)
        else:
            while True:
                try:
                    show(await chain.resume(execution_id))
                    return
                except LeaseHeld as held:
                    await anyio.sleep(max(0.0, (held.expires_at - datetime.now(UTC)).total_seconds()) + 0.05)


if __name__ == "__main__":
    url, backend, scenario, mode, execution_id = sys.argv[1:6]
    anyio.run(main, url, scenario, mode, execution_id, sys.argv[6] if len(sys.argv) > 6 else None,
              backend=backend)
