"""The application `bench/queues.py` runs under `tether worker`: one chain of one async step, and its queue.

The worker process declares the one queue named by ``BENCH_QUEUE_VARIANT`` (so it
serves that queue alone); the benchmark's own process declares all three with
`declare`. Each step appends ``"<job> <time.time()>"`` to the file named by
``BENCH_QUEUE_STAMPS``: the DBOS step in `bench/queues.py` writes the same file.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

from tether.actors import Chain
from tether.runtime import Queue, Rate

VARIANTS = ("no limits", "concurrency", "concurrency + per_key + rate")
KEYS = 20
_stamps: int | None = None


def stamp(job: str) -> None:
    """One line per step start, appended by whichever process runs it (one write, no buffer)."""
    global _stamps
    if _stamps is None:
        _stamps = os.open(os.environ["BENCH_QUEUE_STAMPS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(_stamps, f"{job} {time.time():.6f}\n".encode())


def declare(variant: str, concurrency: int) -> Queue:
    """The queue of a variant (a name of its own each, so that one process may declare all three)."""
    if variant == "no limits":
        return Queue("bench_open")
    if variant == "concurrency":
        return Queue("bench", concurrency=concurrency)
    if variant == "concurrency + per_key + rate":
        return Queue("bench_keyed", concurrency=concurrency, per_key=2,
                     rate=Rate(1_000_000, per=timedelta(minutes=1)))  # far above anything reached here
    raise ValueError(variant)


async def run_job(state: dict[str, Any]) -> dict[str, Any]:
    stamp(state["job"])
    return {"done": True}


job = Chain("queue_job", [run_job])
runners = [job]

if "BENCH_QUEUE_VARIANT" in os.environ:  # the worker process: its one queue
    declare(os.environ["BENCH_QUEUE_VARIANT"], int(os.environ["BENCH_QUEUE_CONCURRENCY"]))
