"""Worker processes on Postgres: resume latency, throughput, recovery after SIGKILL.

    .venv-bench/bin/python -m bench.fleet [--postgres DSN] [--executions 1000] [--plot docs/fleet-bench.png]

- resume-to-running: a decision recorded in this process, until the worker
  process has run the node after the approval (its clock, same machine), with
  the worker woken by NOTIFY (poll every 10 s, so only the notification counts)
  and by polling alone (every 0.5 s);
- throughput: 1, 2 and 4 worker processes (concurrency 8 each) on N detached
  three-node executions, executions per second from the first start to the last end;
- recovery: a worker SIGKILLed while it holds an execution, until another worker
  (already running) takes it over, for leases of 1, 2 and 5 s.

Each measurement uses a schema of its own in the given database.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
from tether.actors import Chain
from tether.runtime import Resume, interrupt
from tether.stores import open_store

ROOT = Path(__file__).resolve().parents[1]
APP = "bench.fleet:runners"


def step(state: dict[str, Any]) -> dict[str, Any]:
    return {"steps": state.get("steps", 0) + 1}


def step_again(state: dict[str, Any]) -> dict[str, Any]:
    return {"steps": state.get("steps", 0) + 1}


def approve(state: dict[str, Any]) -> dict[str, Any]:
    return {"approved": interrupt("approval", {"n": state.get("n")}).approved}


def stamp(state: dict[str, Any]) -> dict[str, Any]:
    return {"ran_at": time.time()}  # the worker's clock: same machine as the bench's


def hold(state: dict[str, Any]) -> dict[str, Any]:
    time.sleep(state.get("hold", 0.0))
    return {"held": True}


LEASE = float(os.environ.get("BENCH_FLEET_LEASE", "30"))
latency = Chain("latency", [approve, stamp], lease_seconds=LEASE)
throughput = Chain("throughput", [step, step_again, stamp], lease_seconds=LEASE)
recovery = Chain("recovery", [hold, stamp], lease_seconds=LEASE)
runners = [latency, throughput, recovery]


def worker(url: str, *, lease: float = 30.0, poll: float = 0.5, notify: bool = True,
           concurrency: int = 8) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "tether.runtime.ops", "--store", url, "worker", "--app", APP,
               "--lease-seconds", str(lease), "--poll-interval", str(poll), "--concurrency", str(concurrency)]
    if not notify:
        command.append("--no-notify")
    env = {**os.environ, "BENCH_FLEET_LEASE": str(lease)}
    return subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.DEVNULL)


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        proc.wait(timeout=60)


def fresh(dsn: str) -> str:
    return f"{dsn}?schema=fleet_{uuid.uuid4().hex[:8]}"


async def wait_status(url: str, ids: list[str], status: str, timeout: float = 300) -> dict[str, Any]:
    """Poll (the condition is another process's commit) until every id has ``status``; their outputs."""
    async with open_store(url) as store:
        deadline = time.monotonic() + timeout
        while True:
            rows = {e.execution_id: e for e in await store.list_executions(limit=100_000)}
            if all(i in rows and rows[i].status == status for i in ids):
                return {i: rows[i].result for i in ids}
            assert time.monotonic() < deadline, f"timed out waiting for {status}"
            await anyio.sleep(0.01)


async def measure_latency(dsn: str, notify: bool, count: int) -> list[float]:
    url = fresh(dsn)
    ids = [f"l-{n}" for n in range(count)]
    async with open_store(url) as store:
        latency.store = store
        for execution_id in ids:
            paused = await latency.run({"n": execution_id}, execution_id=execution_id)
            assert paused.status == "paused"
    procs = [worker(url, poll=10.0 if notify else 0.5, notify=notify)]
    await anyio.sleep(1.5)  # let it start and listen
    samples = []
    try:
        async with open_store(url) as store:
            latency.store = store
            for execution_id in ids:
                decided = time.time()
                await latency.decide(execution_id, Resume(approved=True))
                outputs = await wait_status(url, [execution_id], "completed", timeout=30)
                samples.append((outputs[execution_id]["ran_at"] - decided) * 1000)
    finally:
        stop(procs)
    return samples


async def measure_throughput(dsn: str, workers: int, executions: int) -> float:
    url = fresh(dsn)
    ids = [f"t-{n}" for n in range(executions)]
    async with open_store(url) as store:
        throughput.store = store
        for execution_id in ids:
            await throughput.start({}, execution_id=execution_id)
    started = time.time()
    procs = [worker(url) for _ in range(workers)]
    try:
        outputs = await wait_status(url, ids, "completed")
    finally:
        stop(procs)
    return executions / (max(o["ran_at"] for o in outputs.values()) - started)


async def measure_recovery(dsn: str, lease: float) -> float:
    url = fresh(dsn)
    async with open_store(url) as store:
        recovery.store = store
        await recovery.start({"hold": 3600.0}, execution_id="victim")
        await recovery.start({}, execution_id="probe")  # the same worker's readiness
    first = worker(url, lease=lease, poll=0.2)
    await wait_status(url, ["probe"], "completed", timeout=60)
    async with open_store(url) as store:
        while (await store.get_execution("victim")).lease_owner is None:  # type: ignore[union-attr]
            await anyio.sleep(0.01)
    second = worker(url, lease=lease, poll=0.2)
    await anyio.sleep(1.5)  # running and polling before the kill
    first.kill()
    killed = time.time()
    first.wait()
    try:
        async with open_store(url) as store:
            while True:
                execution = await store.get_execution("victim")
                assert execution is not None
                if execution.lease_owner is not None and f":{second.pid}:" in execution.lease_owner:
                    return time.time() - killed
                await anyio.sleep(0.01)
    finally:
        second.kill()
        second.wait()


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    names = list(results["latency"])
    axes[0].boxplot([results["latency"][n] for n in names], tick_labels=names)
    axes[0].set_yscale("log")
    axes[0].set_ylabel("ms, decision to running")
    axes[0].set_title("resume latency across processes")
    workers = sorted(results["throughput"])
    axes[1].bar([str(w) for w in workers], [results["throughput"][w] for w in workers])
    axes[1].set_xlabel("worker processes")
    axes[1].set_ylabel("executions / s")
    axes[1].set_title(f"throughput, {results['executions']} executions")
    leases = sorted(results["recovery"])
    axes[2].plot(leases, [results["recovery"][x] for x in leases], marker="o", label="measured")
    axes[2].plot(leases, leases, linestyle="--", label="lease length")
    axes[2].set_xlabel("lease seconds")
    axes[2].set_ylabel("s, SIGKILL to taken over")
    axes[2].set_title("recovery after SIGKILL")
    axes[2].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


async def main(args: argparse.Namespace) -> None:
    results: dict[str, Any] = {"executions": args.executions, "latency": {}, "throughput": {}, "recovery": {}}
    for name, notify in (("NOTIFY", True), ("poll 0.5 s", False)):
        samples = await measure_latency(args.postgres, notify, args.decisions)
        results["latency"][name] = samples
        print(f"resume-to-running, {name}: median {statistics.median(samples):.1f} ms, "
              f"p90 {statistics.quantiles(samples, n=10)[-1]:.1f} ms ({len(samples)} decisions)", flush=True)
    for workers in (1, 2, 4):
        rate = await measure_throughput(args.postgres, workers, args.executions)
        results["throughput"][workers] = rate
        print(f"throughput, {workers} worker(s): {rate:.0f} executions/s", flush=True)
    for lease in (1.0, 2.0, 5.0):
        seconds = await measure_recovery(args.postgres, lease)
        results["recovery"][lease] = seconds
        print(f"recovery after SIGKILL, lease {lease:.0f} s: taken over after {seconds:.2f} s", flush=True)
    if args.plot:
        plot(results, Path(args.plot))
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--executions", type=int, default=1000)
    parser.add_argument("--decisions", type=int, default=30)
    parser.add_argument("--plot", default="")
    anyio.run(main, parser.parse_args())
