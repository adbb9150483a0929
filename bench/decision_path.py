"""Where the time from a decision to the next node running goes, on Postgres.

    python -m bench.decision_path [--postgres DSN] [--decisions 30]

One process, two store objects on one Postgres schema: the deciding side's
(`Runner.decide`) and an `ExecutionWorker`'s, woken by NOTIFY. A two-node chain
pauses in its first node; each decision is timed until the second node runs in
the worker, and every store call on the way is stamped as it starts and ends.
Printed: the median of the whole, then of each stretch between two stamps, in
the order they came. The worker shares the process and its loop with the
decider, as it would not in a fleet (`bench.fleet` measures that whole, across
processes); the stretches are what each step costs.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from tether.actors import Chain
from tether.runtime import ExecutionWorker, Resume, interrupt
from tether.stores import Store, open_store

from bench import scaling

CALLS = ("read_journal", "claim", "take_work", "get_execution", "load_execution", "append", "release_lease")

stamps: list[tuple[str, float]] = []
ran = anyio.Event()


def approve(state: dict[str, Any]) -> dict[str, Any]:
    return {"approved": interrupt("approval", {}).approved}


def stamp(state: dict[str, Any]) -> dict[str, Any]:
    stamps.append(("the next node runs", time.perf_counter()))
    ran.set()
    return {"ran": True}


def stamped(store: Store, side: str) -> None:
    """Stamp the start and end of the store's calls of ``CALLS``, named by ``side``."""
    for name in CALLS:
        call: Callable[..., Awaitable[Any]] = getattr(store, name)

        async def timed(*args: Any, _call: Callable[..., Awaitable[Any]] = call, _name: str = name,
                        **kwargs: Any) -> Any:
            stamps.append((f"{side} {_name} starts", time.perf_counter()))
            try:
                return await _call(*args, **kwargs)
            finally:
                stamps.append((f"{side} {_name} ends", time.perf_counter()))

        setattr(store, name, timed)


async def main(dsn: str, decisions: int) -> None:
    wholes: list[float] = []
    stretches: dict[str, list[float]] = {}

    async def body(url: str, conn: Any, schema: str) -> None:
        global ran
        deciding, working = Chain("latency", [approve, stamp]), Chain("latency", [approve, stamp])
        async with open_store(url) as mine, open_store(url) as theirs:
            deciding.store = mine
            for n in range(decisions + 1):
                assert (await deciding.run({}, execution_id=f"d-{n}")).status == "paused"
            stamped(mine, "decider:")
            stamped(theirs, "worker:")
            async with ExecutionWorker(theirs, [working], concurrency=8, poll_interval=10.0) as worker, \
                    anyio.create_task_group() as tg:
                tg.start_soon(worker.serve)
                for n in range(decisions + 1):
                    ran = anyio.Event()
                    stamps.clear()
                    started = time.perf_counter()
                    await deciding.decide(f"d-{n}", Resume(approved=True))
                    await ran.wait()
                    ends = stamps[-1][1]
                    await anyio.sleep(0.05)  # the run's completion, off the path measured
                    if n == 0:
                        continue  # the worker's first run: its statements prepared, its pool grown
                    wholes.append((ends - started) * 1000)
                    before = started
                    for name, at in [s for s in stamps if s[1] <= ends]:
                        stretches.setdefault(name, []).append((at - before) * 1000)
                        before = at
                worker.stop()

    await scaling.with_schema(dsn, body)
    print(f"decision to the next node running: median {statistics.median(wholes):.2f} ms "
          f"(min {min(wholes):.2f}, max {max(wholes):.2f}; {len(wholes)} decisions)\n")
    print("| stretch ending when | median ms |\n|---|---:|")
    for name, values in stretches.items():
        if len(values) == len(wholes):  # on the path every time
            print(f"| {name} | {statistics.median(values):.2f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--decisions", type=int, default=30)
    args = parser.parse_args()
    anyio.run(main, args.postgres, args.decisions, backend="asyncio")
