"""Queues and the runner the queue fleet tests run: `tether worker --app tests.operator._queue_app:runners`.

Each node appends ``start``/``end`` lines (execution, pid, monotonic ns) to the file
TETHER_QUEUE_LOG names, so the test can see what ran at once across processes.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

import anyio
from tether.actors import Chain
from tether.runtime import Queue, Rate

LOG = os.environ.get("TETHER_QUEUE_LOG", "")

limited = Queue("limited", concurrency=4)
keyed = Queue("keyed", concurrency=10, per_key=1)
paced = Queue("paced", rate=Rate(5, per=timedelta(seconds=2)))
ranked = Queue("ranked", concurrency=1, priority=True)


def mark(what: str, state: dict[str, Any]) -> None:
    with open(LOG, "a") as log:  # one short append each: lines from several processes never interleave
        log.write(f"{what} {state['id']} {os.getpid()} {time.monotonic_ns()} {state.get('key', '-')}\n")


async def work(state: dict[str, Any]) -> dict[str, Any]:
    mark("start", state)
    await anyio.sleep(state.get("work", 0.05))  # the job's own work, holding its slot meanwhile
    mark("end", state)
    return {"by": os.getpid()}


jobs = Chain("jobs", [work], lease_seconds=1.0)
runners = [jobs]
