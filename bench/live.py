"""Live control across processes: how soon a cancel stops a running step, and a message wakes a run.

    .venv/bin/python -m bench.live [--rounds 20] [--postgres DSN] [--sqlite-poll 0.2]

Every figure is across two processes on one machine: a `tether worker` process
runs the executions, this process controls them through a store object of its
own, on SQLite (a temp file, WAL) and on Postgres (a schema of its own).

1. cancel a running step: the worker runs a node that awaits forever. This
   process calls `tether.runtime.cancel(store, id)` and measures until the
   node's `await` is cut in the worker (its clock, stamped in the node's
   ``finally``) and until `cancel` returned ``cancelled`` here (the worker has
   journaled the verdict and let the lease go). Postgres tells the worker by
   ``NOTIFY``; SQLite by the worker's ``data_version`` check every
   ``SQLiteStore.control_interval`` (0.25 s).
2. a message to a parked run: the execution waits in ``wait_for(Ping)``, parked
   with no task or lease. This process calls `send_message`; measured until the
   worker's node has the message (its clock). Postgres wakes the worker by
   ``NOTIFY`` (its poll is set to 10 s, so only the notification counts); SQLite
   by the worker's poll (``--sqlite-poll``).
3. cancel a paused execution: one call of `cancel` in this process, nothing
   running anywhere (one transaction, the pending row deleted with it).

p50/p95/max over the rounds, in milliseconds.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel
from tether.actors import Chain
from tether.runtime import cancel, interrupt, send_message, wait_for
from tether.stores import open_store

ROOT = Path(__file__).resolve().parents[1]
APP = "bench.live:runners"
STAMPS = Path(os.environ.get("BENCH_LIVE_STAMPS", tempfile.gettempdir()))


class Ping(BaseModel):
    n: int


def stamp(execution_id: str, what: str) -> None:
    """Note, outside the store, when the worker reached ``what`` for this execution (its clock)."""
    path = STAMPS / f"{execution_id}.{what}"
    path.with_suffix(".tmp").write_text(repr(time.time()))
    path.with_suffix(".tmp").rename(path)  # whole or not there: the reader never sees half a number


async def hang(state: dict[str, Any]) -> dict[str, Any]:
    stamp(state["id"], "entered")
    try:
        await anyio.sleep_forever()
    finally:
        stamp(state["id"], "cut")
    return {}


async def receive(state: dict[str, Any]) -> dict[str, Any]:
    ping = await wait_for(Ping)
    assert ping is not None  # no timeout: it waits for one
    return {"got": time.time(), "n": ping.n}


def approve(state: dict[str, Any]) -> dict[str, Any]:
    return {"approved": interrupt("approval", {}).approved}


hanging = Chain("hanging", [hang])
receiving = Chain("receiving", [receive])
paused = Chain("paused", [approve])
runners = [hanging, receiving, paused]


def worker(url: str, poll: float) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "tether.runtime.ops", "--store", url, "worker", "--app", APP,
               "--poll-interval", str(poll), "--concurrency", "4"]
    return subprocess.Popen(command, cwd=ROOT, env={**os.environ, "BENCH_LIVE_STAMPS": str(STAMPS)},
                            stderr=subprocess.DEVNULL)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)


async def stamped(execution_id: str, what: str, timeout: float = 30) -> float:
    """The worker's stamp; polled, since it is another process's file."""
    path = STAMPS / f"{execution_id}.{what}"
    with anyio.fail_after(timeout):
        while not path.exists():
            await anyio.sleep(0.002)
    return float(path.read_text())


async def cancel_running(url: str, rounds: int, poll: float) -> dict[str, list[float]]:
    cut: list[float] = []
    returned: list[float] = []
    proc = worker(url, poll)
    try:
        async with open_store(url) as store:
            hanging.store = store
            for _ in range(rounds):
                execution_id = f"c-{uuid.uuid4().hex[:10]}"
                await hanging.start({"id": execution_id}, execution_id=execution_id, detach=True)
                await stamped(execution_id, "entered")
                asked = time.time()
                result = await cancel(store, execution_id, reason="bench")
                done = time.time()
                assert result.status == "cancelled", result
                cut.append((await stamped(execution_id, "cut") - asked) * 1000)
                returned.append((done - asked) * 1000)
    finally:
        stop(proc)
    return {"cancel to the node cut (worker)": cut, "cancel to cancelled (here)": returned}


async def message_parked(url: str, rounds: int, poll: float) -> dict[str, list[float]]:
    delivered: list[float] = []
    async with open_store(url) as store:
        receiving.store = store
        ids = [f"m-{uuid.uuid4().hex[:10]}" for _ in range(rounds)]
        for execution_id in ids:
            assert (await receiving.run({}, execution_id=execution_id)).status == "paused"
        proc = worker(url, poll)
        try:
            await anyio.sleep(1.5)  # started and listening
            for n, execution_id in enumerate(ids):
                sent = time.time()
                await send_message(store, execution_id, Ping(n=n))
                with anyio.fail_after(30):
                    while (found := await store.get_execution(execution_id)) is None or found.status != "completed":
                        await anyio.sleep(0.002)
                result = found.result
                assert isinstance(result, dict), result
                assert result["n"] == n, result
                delivered.append((float(str(result["got"])) - sent) * 1000)
        finally:
            stop(proc)
    return {"send_message to the node has it (worker)": delivered}


async def cancel_paused(url: str, rounds: int) -> dict[str, list[float]]:
    took: list[float] = []
    async with open_store(url) as store:
        paused.store = store
        for _ in range(rounds):
            execution_id = f"p-{uuid.uuid4().hex[:10]}"
            assert (await paused.run({}, execution_id=execution_id)).status == "paused"
            started = time.perf_counter()
            result = await cancel(store, execution_id, reason="bench")
            took.append((time.perf_counter() - started) * 1000)
            assert result.status == "cancelled"
            assert not await store.list_pending(execution_id=execution_id)
    return {"cancel a paused execution (here)": took}


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def table(title: str, rows: dict[str, dict[str, list[float]]]) -> None:
    print(f"\n{title}\n")
    print(f"| {'store':<26} | {'measure':<42} | {'p50 ms':>8} | {'p95 ms':>8} | {'max ms':>8} |")
    print(f"|{'-' * 28}|{'-' * 44}|{'-' * 10}|{'-' * 10}|{'-' * 10}|")
    for store, measures in rows.items():
        for name, samples in measures.items():
            print(f"| {store:<26} | {name:<42} | {statistics.median(samples):>8.2f} | "
                  f"{percentile(samples, 0.95):>8.2f} | {max(samples):>8.2f} |", flush=True)


async def main(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="tether-live-"))
    STAMPS.mkdir(parents=True, exist_ok=True)
    stores: list[tuple[str, str, float]] = [(f"SQLite (poll {args.sqlite_poll:g} s)",
                                             f"sqlite:///{tmp / 'live.db'}", args.sqlite_poll)]
    if args.postgres:
        stores.append(("Postgres (NOTIFY)", f"{args.postgres}?schema=live_{uuid.uuid4().hex[:8]}", 10.0))
    for name, url, _ in stores:
        async with open_store(url) as store:
            await store.setup()
        print(f"{name}: {url}", flush=True)
    cancels = {name: await cancel_running(url, args.rounds, poll) for name, url, poll in stores}
    table("1. cancel a running step, from another process", cancels)
    messages = {name: await message_parked(url, args.rounds, poll) for name, url, poll in stores}
    table("2. a message to a parked run, woken in a worker", messages)
    idle = {name: await cancel_paused(url, args.rounds) for name, url, _ in stores}
    table("3. cancel a paused execution", idle)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="a database to make a schema in ('' to skip Postgres)")
    parser.add_argument("--sqlite-poll", type=float, default=0.2, help="the SQLite worker's --poll-interval")
    STAMPS = Path(tempfile.mkdtemp(prefix="tether-live-stamps-"))
    anyio.run(main, parser.parse_args())
