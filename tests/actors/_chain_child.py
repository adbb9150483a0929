"""A process that runs one scenario's chain, for the SIGKILL tests.

Usage: python _chain_child.py STORE_URL BACKEND SCENARIO MODE EXECUTION_ID [SCHEMA]

MODE: run | recover | resume (approves a pause). With TETHER_TEST_BLOCK=<node>:<visit>,
that visit of that node prints "in <node>" and blocks until the process is killed.
Every node run is appended to TETHER_TEST_RUNS (outside the store), fsynced.
"""

from __future__ import annotations

import os
from typing import Any

import anyio
from _child import run_child, say
from tether.actors import Chain
from tether.runtime import interrupt, patched, sleep
from tether.stores import Store

RUNS_FILE = os.environ["TETHER_TEST_RUNS"]
BLOCK = os.environ.get("TETHER_TEST_BLOCK", "")
CODE = os.environ.get("TETHER_TEST_CODE", "new")  # the "patch" scenario's approve: before or after patched()


def visits(name: str) -> int:
    with open(RUNS_FILE) as runs:
        return sum(1 for line in runs if line.strip() == name)


def note(line: str) -> None:
    with open(RUNS_FILE, "a") as runs:
        runs.write(line + "\n")
        runs.flush()
        os.fsync(runs.fileno())


def block_at(name: str) -> None:
    if BLOCK == f"{name}:{visits(name)}":
        say(f"in {name}")
        anyio.from_thread.run(anyio.sleep_forever)  # killed here


def node(name: str, **update: Any) -> Any:
    def fn(state: Any) -> dict[str, Any]:
        note(name)
        block_at(name)
        counts = dict(state.get("counts", {}))
        counts[name] = counts.get(name, 0) + 1
        return {"counts": counts, name: True, **update}

    fn.__name__ = name
    return fn


def approve(state: Any) -> dict[str, Any]:
    decision = interrupt("manager_approval", {"amount": state["amount"]})
    return {"approved": decision.approved}


def approve_patched(state: Any) -> dict[str, Any]:
    """``approve`` after a deploy that pages first: killed, when asked, between the check and its boundary."""
    paged = patched("page-first")
    note(f"patched:{paged}")
    note("approve")
    block_at("approve")
    decision = interrupt("manager_approval", {"amount": state["amount"]})
    return {"approved": decision.approved, "paged": paged}


async def timer_then_patched(state: Any) -> dict[str, Any]:
    """A durable step of the call journaled before the check: killed, when asked, right after the check."""
    await sleep(0)
    paged = patched("page-first")
    note(f"patched:{paged}")
    note("approve")
    if BLOCK == f"approve:{visits('approve')}":
        say("in approve")
        await anyio.sleep_forever()  # killed here
    return {"paged": paged}


def build(scenario: str, store: Store) -> Chain:
    chain = Chain(scenario, store=store, lease_seconds=60.0)
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
    elif scenario == "patch_step":
        chain.add_node(timer_then_patched, "approve")
    elif scenario in ("approval", "patch"):
        chain.add_node(node("validate"))
        chain.add_node(approve_patched if scenario == "patch" and CODE == "new" else approve, "approve")
        chain.add_node(node("charge"))
        chain.add_edge("validate", "approve")
        chain.add_edge("approve", "charge")
    return chain


if __name__ == "__main__":
    run_child(lambda scenario, store: (build(scenario, store), dict), {"x": True, "amount": 50_000})
