"""A process that runs a chain whose node fails and is retried with a durable backoff, for the SIGKILL tests.

Usage: python _retry_child.py STORE_URL BACKEND SCENARIO MODE EXECUTION_ID [SCHEMA]

MODE: run | recover. The node ``flaky`` appends ``flaky`` to TETHER_TEST_RUNS (outside
the store, fsynced) on every attempt and fails its first two attempts; the policy waits
0.8 s (±10%) between attempts. Each journal write is announced (``recorded retry`` once
a failure is journaled), so the parent can kill the process during the wait.
"""

from __future__ import annotations

import os
from typing import Any

from _child import run_child
from tether.actors import Chain
from tether.runtime import RetryPolicy
from tether.stores import Store

RUNS_FILE = os.environ["TETHER_TEST_RUNS"]
FAILURES = 2
POLICY = RetryPolicy(max_attempts=4, initial=0.8, multiplier=1.0, jitter=0.1)


def attempt() -> int:
    """Note this attempt outside the store; its number among the attempts noted so far."""
    with open(RUNS_FILE, "a") as runs:
        runs.write("flaky\n")
        runs.flush()
        os.fsync(runs.fileno())
    with open(RUNS_FILE) as runs:
        return sum(1 for line in runs if line.strip() == "flaky")


async def flaky(state: Any) -> dict[str, Any]:
    number = attempt()
    if number <= FAILURES:
        raise ConnectionError(f"upstream down (attempt {number})")
    return {"succeeded_on": number}


def build(scenario: str, store: Store) -> Chain:
    chain = Chain(scenario, store=store, lease_seconds=60.0)
    chain.add_node(flaky, retry=POLICY)
    return chain


if __name__ == "__main__":
    run_child(lambda scenario, store: (build(scenario, store), dict), {})
