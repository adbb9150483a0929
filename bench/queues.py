"""Queues on Postgres: tether's `Queue` against DBOS 3.4's queues, one worker process each.

    .venv-bench/bin/python -m bench.queues [--postgres DSN] [--jobs 500] [--concurrency 10] [--rounds 3]

The workload is the same for both: N jobs, each an execution (tether, a `Chain`
of one node) or a workflow (DBOS, one `@DBOS.step`) whose only step is an async
function that appends its job's id and `time.time()` to a file and returns. The
jobs go into a queue of concurrency C, from this process, one after another
(tether `chain.start(..., queue=q)`, DBOS `queue.enqueue(...)` of a
`DBOS.register_queue("bench", global_concurrency=C)`), and ONE worker process
consumes them: a `tether worker --concurrency C` (poll every
1 s, woken by NOTIFY), or a launched DBOS process whose queue is polled every
`polling_interval_sec` (1 s, its default; and 0.1 s). This process's own DBOS
listens to no queue.

Per system and round, one worker process for the three phases:

- drain (enqueue excluded): N jobs enqueued before the worker starts, then
  N / (last completion - first step start); the clock starts at the first step,
  so the worker's start-up is not counted either;
- live (enqueue included): N more jobs enqueued as fast as this process can,
  one after another, while the worker runs; N / (last completion - first
  enqueue call). A completion is the job's row as its system wrote it at the
  end (tether `updated_at`, DBOS `updated_at`);
- the enqueue rate of that burst, reported beside it: N / the time this process
  took to enqueue the N jobs; the live figure cannot pass it;
- latency in the live burst: from an enqueue call's return (the job is
  committed) to its step's start, per job (mostly the wait behind the jobs
  before it);
- paced latency: the same for 30 jobs enqueued alone, 0.1-0.3 s apart (the
  same random gaps for every system in a round), below either system's capacity.

tether runs three queues: no limits (the worker's own --concurrency C bounds it),
concurrency=C, and concurrency=C with per_key=2 over 20 keys (job i has key
i mod 20) and a Rate of a million a minute, which never binds. The systems
run in a shuffled order each round. Each measurement has a schema of its own
in a database made for the run and dropped at its end; times are one
machine's `time.time()` across processes.
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import anyio.to_thread
import asyncpg
from tether.stores import open_store

from bench import _queue_app

ROOT = Path(__file__).resolve().parents[1]
APP = "bench._queue_app:runners"
PACED = 30
TIMEOUT = 600.0


# --- shared ---------------------------------------------------------------------------------------


def read_stamps(path: Path) -> dict[str, float]:
    """The step starts written so far (a line still being written is left for the next read)."""
    if not path.exists():
        return {}
    lines = path.read_text().split("\n")[:-1]
    return {job: float(at) for job, at in (line.split() for line in lines)}


def missing(path: Path, ids: list[str]) -> tuple[dict[str, float], bool]:
    stamps = read_stamps(path)
    return stamps, all(i in stamps for i in ids)


def pct(samples: list[float], q: int) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1]


def figures(drained: list[str], drain_stamps: dict[str, float], drain_done: float, jobs: list[str],
            called: float, enqueued: dict[str, float], last_done: float, paced: dict[str, float],
            stamps: dict[str, float]) -> dict[str, float]:
    burst = [(stamps[j] - enqueued[j]) * 1000 for j in jobs]
    quiet = [(stamps[j] - at) * 1000 for j, at in paced.items()]
    return {
        "drain": len(drained) / (drain_done - min(drain_stamps[j] for j in drained)),
        "live": len(jobs) / (last_done - called),
        "enqueue": len(jobs) / (max(enqueued.values()) - called),
        "burst p50": statistics.median(burst), "burst p95": pct(burst, 95),
        "paced p50": statistics.median(quiet), "paced p95": pct(quiet, 95),
    }


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def check_alive(proc: subprocess.Popen[bytes], log: Path) -> None:
    if proc.poll() is not None:
        raise RuntimeError(f"worker exited with {proc.returncode}:\n{log.read_text()[-3000:]}")


def gaps(seed: int) -> list[float]:
    rng = random.Random(seed)
    return [rng.uniform(0.1, 0.3) for _ in range(PACED)]


# --- tether ---------------------------------------------------------------------------------------


async def measure_tether(db: str, tmp: Path, variant: str, jobs: int, concurrency: int,
                         seed: int) -> dict[str, float]:
    schema = f"tq_{uuid.uuid4().hex[:8]}"
    url = f"{db}?schema={schema}"
    stamps_path, log = tmp / f"{schema}.stamps", tmp / f"{schema}.log"
    queue = _queue_app.declare(variant, concurrency)
    keyed = variant == "concurrency + per_key + rate"
    chain = _queue_app.job
    env = {**os.environ, "BENCH_QUEUE_STAMPS": str(stamps_path), "BENCH_QUEUE_VARIANT": variant,
           "BENCH_QUEUE_CONCURRENCY": str(concurrency)}

    async def enqueue(job: str, n: int) -> float:
        await chain.start({"job": job}, execution_id=job, queue=queue, key=f"k{n % _queue_app.KEYS}" if keyed else None)
        return time.time()

    async def completed(ids: list[str]) -> float:
        while True:
            done = {e.execution_id: e for e in await store.list_executions(status="completed", limit=100_000)}
            if all(i in done for i in ids):
                return max(done[i].updated_at.timestamp() for i in ids)
            await anyio.sleep(0.02)

    async with open_store(url) as store:  # creates the schema before the worker opens it
        chain.store = store
        drained = [f"d{n}" for n in range(jobs)]
        for n, job in enumerate(drained):  # the backlog, before any worker runs
            await enqueue(job, n)
        with log.open("wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tether.runtime.ops", "--store", url, "worker", "--app", APP,
                 "--concurrency", str(concurrency)], cwd=ROOT, env=env, stdout=err, stderr=err)
        try:
            drain_stamps = await anyio.to_thread.run_sync(sync_stamps, stamps_path, drained, proc, log)
            drain_done = await completed(drained)
            ids = [f"b{n}" for n in range(jobs)]
            enqueued: dict[str, float] = {}
            called = time.time()
            for n, job in enumerate(ids):
                enqueued[job] = await enqueue(job, n)
            stamps = await anyio.to_thread.run_sync(sync_stamps, stamps_path, ids, proc, log)
            last_done = await completed(ids)
            paced: dict[str, float] = {}
            for n, gap in enumerate(gaps(seed)):
                await anyio.sleep(gap)
                paced[f"p{n}"] = await enqueue(f"p{n}", n)
            stamps = await anyio.to_thread.run_sync(sync_stamps, stamps_path, list(paced), proc, log)
        finally:
            stop(proc)
    return figures(drained, drain_stamps, drain_done, ids, called, enqueued, last_done, paced, stamps)


# --- DBOS -----------------------------------------------------------------------------------------


@functools.cache
def dbos_job() -> Any:
    """The DBOS workflow, registered once per process, under names of its own (the same in both processes)."""
    from dbos import DBOS

    @DBOS.step(name="bench_step")
    async def step(job: str) -> None:
        _queue_app.stamp(job)

    @DBOS.workflow(name="bench_job")
    async def workflow(job: str) -> None:
        await step(job)

    return workflow


def dbos_config(db: str, schema: str, executor: str) -> dict[str, Any]:
    return {"name": "bench", "log_level": "WARNING", "system_database_url": db, "dbos_system_schema": schema,
            "application_version": "bench", "executor_id": executor}


def serve_dbos(db: str, schema: str, concurrency: int, poll: float) -> None:
    """The DBOS worker process: launched, dequeuing from "bench", until SIGTERM."""
    from dbos import DBOS

    dbos_job()
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    DBOS(config=dbos_config(db, schema, "worker"))  # type: ignore[arg-type]
    DBOS.launch()
    try:
        DBOS.register_queue("bench", global_concurrency=concurrency, polling_interval_sec=poll)
        while not stopping.wait(0.2):
            pass
    finally:
        DBOS.destroy()


def sync_stamps(path: Path, ids: list[str], proc: subprocess.Popen[bytes], log: Path) -> dict[str, float]:
    deadline = time.monotonic() + TIMEOUT
    while True:
        stamps, done = missing(path, ids)
        if done:
            return stamps
        check_alive(proc, log)
        assert time.monotonic() < deadline, "timed out waiting for the steps"
        time.sleep(0.02)


def measure_dbos(db: str, tmp: Path, poll: float, jobs: int, concurrency: int, seed: int) -> dict[str, float]:
    from dbos import DBOS, SetWorkflowID

    workflow = dbos_job()
    schema = f"dq_{uuid.uuid4().hex[:8]}"
    stamps_path, log = tmp / f"{schema}.stamps", tmp / f"{schema}.log"
    env = {**os.environ, "BENCH_QUEUE_STAMPS": str(stamps_path)}
    DBOS(config=dbos_config(db, schema, "enqueuer"))  # type: ignore[arg-type]
    DBOS.listen_queues([])  # this process enqueues only
    DBOS.launch()  # creates the schema before the worker opens it
    try:
        queue = DBOS.register_queue("bench", global_concurrency=concurrency, polling_interval_sec=poll)

        def enqueue(job: str) -> float:
            with SetWorkflowID(job):
                queue.enqueue(workflow, job)
            return time.time()

        def completed(ids: list[str]) -> float:
            while True:
                done = {w.workflow_id: w for w in DBOS.list_workflows(
                    status="SUCCESS", queue_name="bench", load_input=False, load_output=False)}
                if all(i in done for i in ids):
                    return max(done[i].updated_at or 0 for i in ids) / 1000
                time.sleep(0.02)

        drained = [f"d{n}" for n in range(jobs)]
        for job in drained:  # the backlog, before any worker runs
            enqueue(job)
        with log.open("wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "bench.queues", "--serve-dbos", "--dbos-db", db, "--dbos-schema", schema,
                 "--concurrency", str(concurrency), "--dbos-poll", str(poll)],
                cwd=ROOT, env=env, stdout=err, stderr=err)
        try:
            drain_stamps = sync_stamps(stamps_path, drained, proc, log)
            drain_done = completed(drained)
            ids = [f"b{n}" for n in range(jobs)]
            enqueued: dict[str, float] = {}
            called = time.time()
            for job in ids:
                enqueued[job] = enqueue(job)
            stamps = sync_stamps(stamps_path, ids, proc, log)
            last_done = completed(ids)
            paced: dict[str, float] = {}
            for n, gap in enumerate(gaps(seed)):
                time.sleep(gap)
                paced[f"p{n}"] = enqueue(f"p{n}")
            stamps = sync_stamps(stamps_path, list(paced), proc, log)
        finally:
            stop(proc)
    finally:
        DBOS.destroy()
    return figures(drained, drain_stamps, drain_done, ids, called, enqueued, last_done, paced, stamps)


# --- the run --------------------------------------------------------------------------------------


def with_database(dsn: str, name: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", "", ""))


async def admin(dsn: str, sql: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


COLUMNS = ("drain", "live", "enqueue", "burst p50", "burst p95", "paced p50", "paced p95")


def report(results: dict[str, list[dict[str, float]]], jobs: int, concurrency: int) -> str:
    med = {name: {c: statistics.median(r[c] for r in rounds) for c in COLUMNS} for name, rounds in results.items()}
    rounds_run = len(next(iter(results.values())))
    title = f"\n{jobs} one-step jobs, queue concurrency {concurrency}, one worker process; medians of {rounds_run} rounds\n"
    header = ("| system | drain, jobs/s | live, jobs/s | enqueue beside the worker, jobs/s "
              "| latency in the live burst, p50 / p95 ms | paced latency, p50 / p95 ms |")
    lines = [title, header, "|---|---|---|---|---|---|"]
    for name, rounds in results.items():
        m = med[name]
        spread = {c: f"{min(r[c] for r in rounds):,.0f}-{max(r[c] for r in rounds):,.0f}" for c in ("drain", "live")}
        lines.append(f"| {name} | {m['drain']:,.0f} ({spread['drain']}) | {m['live']:,.0f} ({spread['live']}) | "
                     f"{m['enqueue']:,.0f} | {m['burst p50']:,.0f} / {m['burst p95']:,.0f} | "
                     f"{m['paced p50']:,.1f} / {m['paced p95']:,.1f} |")
    base = med.get("tether, concurrency")
    if base:
        lines.append("")
        for name, m in med.items():
            if name != "tether, concurrency":
                lines.append(f"ratio queues {name} / tether (concurrency): drain {m['drain'] / base['drain']:.2f}, "
                             f"live {m['live'] / base['live']:.2f}, paced p50 {m['paced p50'] / base['paced p50']:.2f}")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> None:
    name = f"tether_bench_queues_{uuid.uuid4().hex[:8]}"
    anyio.run(admin, args.postgres, f"CREATE DATABASE {name}")
    db = with_database(args.postgres, name)
    tmp = Path(tempfile.mkdtemp(prefix="tether-queues-bench-"))
    systems: list[tuple[str, Callable[[int], dict[str, float]]]] = [
        *[(f"DBOS, poll {poll:g} s" + (" (default)" if poll == 1.0 else ""),
           functools.partial(lambda seed, poll: measure_dbos(db, tmp, poll, args.jobs, args.concurrency, seed),
                             poll=poll))
          for poll in args.dbos_polls],
        *[(f"tether, {variant}",
           functools.partial(lambda seed, variant: anyio.run(
               measure_tether, db, tmp, variant, args.jobs, args.concurrency, seed), variant=variant))
          for variant in _queue_app.VARIANTS],
    ]
    results: dict[str, list[dict[str, float]]] = defaultdict(list)
    began = time.monotonic()
    try:
        for r in range(args.rounds):
            order = systems[:]
            random.Random(1000 + r).shuffle(order)
            for label, run in order:
                got = run(r)
                results[label].append(got)
                print(f"round {r + 1} {label}: drain {got['drain']:,.0f} jobs/s, live {got['live']:,.0f} jobs/s "
                      f"(enqueue {got['enqueue']:,.0f}/s), "
                      f"burst p50/p95 {got['burst p50']:,.0f}/{got['burst p95']:,.0f} ms, "
                      f"paced p50/p95 {got['paced p50']:,.1f}/{got['paced p95']:,.1f} ms", flush=True)
    finally:
        anyio.run(admin, args.postgres, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    ordered = {label: results[label] for label, _ in systems if results[label]}
    print(report(ordered, args.jobs, args.concurrency))
    print(f"\n{time.monotonic() - began:.0f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="admin DSN; the run creates a database of its own and drops it")
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dbos-polls", type=lambda s: [float(x) for x in s.split(",")], default=[1.0, 0.1],
                        help="DBOS queue polling intervals to measure, in seconds (its default is 1)")
    parser.add_argument("--serve-dbos", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--dbos-db", help=argparse.SUPPRESS)
    parser.add_argument("--dbos-schema", help=argparse.SUPPRESS)
    parser.add_argument("--dbos-poll", type=float, default=1.0, help=argparse.SUPPRESS)
    parsed = parser.parse_args()
    if parsed.serve_dbos:
        serve_dbos(parsed.dbos_db, parsed.dbos_schema, parsed.concurrency, parsed.dbos_poll)
    else:
        main(parsed)
