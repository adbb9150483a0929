"""The soak: mixed work for a long time under faults, then an account of every execution.

`pytest -m soak -n 0 -s` runs it for TETHER_SOAK_SECONDS (3600 by default) on
each store; the ten-minute version is in the torture set (`-m torture -k soak`).
Neither runs in CI.

For DURATION seconds the test (this process) starts executions of six kinds
(`tests.soak._app`) detached, at a steady pace, and decides their approvals from
OTHER processes: mostly through the HTTP API of a `tether serve`, every fifth by
a `tether resume ID --set approved=true --detach` process. `tether worker`
processes run everything. Every 15-45 s a random worker is SIGKILLed and a new
one started (the summary counts how many kills hit a worker that held
executions); on Postgres the server is stopped and restarted (down 3 s, past
the workers' 2 s leases) every DURATION/6, so every ten minutes in the hour.
Workers take turns between asyncio and trio, so both backends carry the load.
A worker that exits by itself is restarted after a second, as a service
manager would, and counted (none should: one started while the server is down
waits for it).

Some processes are never killed: the `tether serve` on both stores, and on
Postgres one of the three workers (SQLite allows one worker process at a time,
and that one is the one killed). Their RSS (VmRSS) and open file descriptors
are sampled to ``samples.csv`` all along.

Then the test stops starting work and killing, lets everything drain (it still
decides approvals), and checks:

- every execution it started exists, and is completed exactly once (one root
  ``completed`` journal entry) or paused with its pending row;
- every charge landed once per idempotency key, and every completed execution
  was charged exactly once (under one key; no paused one was charged);
- RSS and file descriptors of the long-lived processes are flat.

It writes ``samples.csv`` and ``summary.json`` to TETHER_SOAK_OUT (default: the
test's tmp dir); `bench/soak_plot.py` draws the samples for docs/reliability.md.
All traffic goes to 127.0.0.1 and a Unix socket; every loop ends at a deadline.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import random
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import anyio
import pytest
from tether.stores import Execution, StoreError, open_store

from tests._postgres import restartable_server

from ._app import BY_KIND, KINDS, prepare

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from tether.stores import Store

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.soak._app:runners"
DURATION = float(os.environ.get("TETHER_SOAK_SECONDS", "3600"))
TORTURE_DURATION = 600.0
DRAIN = 240.0  # seconds for the backlog to finish once the faults stop
START_EVERY = 0.5  # seconds between two starts: about 7,200 executions in the hour
KILL_EVERY = (15.0, 45.0)  # a worker SIGKILLed at a random moment in this range
PG_DOWN = 3.0  # seconds the server stays down at each restart: past the 2 s leases
LEASE = "2"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _inputs(kind: str, execution_id: str, rng: random.Random) -> Any:
    # `work` holds the execution for a while, so that a kill often lands while a worker runs one.
    if kind == "order":
        return {"order": execution_id, "work": round(rng.uniform(0.1, 1.0), 2)}
    if kind == "timer":
        return {"order": execution_id, "work": round(rng.uniform(0.1, 1.0), 2), "nap": round(rng.uniform(1.0, 8.0), 2)}
    if kind == "deadline":
        return {"order": execution_id, "timeout": round(rng.uniform(2.0, 6.0), 2)}
    return f"charge order={execution_id}"


def _sample(pid: int) -> tuple[int, int] | None:
    """VmRSS in kB and the number of open file descriptors of ``pid``, or None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError):
        return None
    rss = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
    return rss, fds


@dataclass
class Soak:
    """The processes of one soak on one store, and the tally of what was done to them."""

    kind: str  # "sqlite" or "postgres"
    url: str
    out: Path
    duration: float
    restart_postgres: Callable[[float], None] | None = None
    seed: int = field(default_factory=lambda: int(os.environ.get("TETHER_SOAK_SEED") or random.randrange(2**32)))
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    anchor: subprocess.Popen[bytes] | None = None  # the worker that is never killed (Postgres)
    serve: subprocess.Popen[bytes] | None = None
    port: int = 0
    started: dict[str, str] = field(default_factory=dict)  # execution id -> kind
    decided: dict[str, str] = field(default_factory=dict)  # execution id -> "http" or "cli"
    tally: Counter[str] = field(default_factory=Counter)
    samples: list[dict[str, Any]] = field(default_factory=list)
    killed: set[int] = field(default_factory=set)  # pids the test SIGKILLed
    exited: set[int] = field(default_factory=set)  # pids that exited by themselves
    t0: float = 0.0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)  # TETHER_SOAK_SEED replays the same kill moments and inputs

    @property
    def effects(self) -> Path:
        return self.out / "effects.db"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "TETHER_SOAK_EFFECTS": str(self.effects)}

    def _spawn(self, name: str, *args: str, backend: str = "asyncio") -> subprocess.Popen[bytes]:
        log = (self.out / f"{name}.log").open("ab")  # kept for evidence; the child writes to its own copy
        try:
            return subprocess.Popen([sys.executable, "-m", "tether.runtime.ops", "--store", self.url,
                                     "--backend", backend, *args],
                                    env=self.env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        finally:
            log.close()

    def start_worker(self) -> subprocess.Popen[bytes]:
        backend = ("asyncio", "trio")[len(self.workers) % 2]
        self.tally[f"workers_{backend}"] += 1
        proc = self._spawn(f"worker-{len(self.workers)}", "worker", "--app", APP, "--lease-seconds", LEASE,
                           "--poll-interval", "0.5", "--concurrency", "8", "--grace", "10", backend=backend)
        self.workers.append(proc)
        return proc

    def start_serve(self) -> None:
        self.port = _free_port()
        self.serve = self._spawn("serve", "serve", "--host", "127.0.0.1", "--port", str(self.port))

    def killable(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.workers if p is not self.anchor and p.poll() is None]

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    # The driver's tasks.

    async def starter(self, store: Store) -> None:
        n = 0
        while True:
            kind = KINDS[n % len(KINDS)]
            execution_id = f"{kind}-{n:06d}"
            runner = BY_KIND[kind]
            try:
                await runner.start(_inputs(kind, execution_id, self.rng), execution_id=execution_id, detach=True)
            except StoreError:
                self.tally["start_retries"] += 1  # the server is restarting: the same id again next time
            else:
                self.started[execution_id] = kind
                n += 1
            await anyio.sleep(START_EVERY)  # the soak's pacing, not a wait for anything

    async def decider(self, store: Store, *, cli: bool = True) -> None:
        """Decide every approval without a deadline, from other processes, as it appears."""
        while True:
            try:
                pending = await store.list_pending(limit=10_000)
            except StoreError:
                pending = []
            for row in pending:
                if row.deadline is not None or row.execution_id in self.decided:
                    continue  # a deadline is the worker's to decide
                via = "cli" if cli and len(self.decided) % 5 == 4 else "http"
                self.decided[row.execution_id] = via
                ok = await (self._decide_cli(row.execution_id) if via == "cli" else self._decide_http(row.execution_id))
                if not ok:
                    del self.decided[row.execution_id]  # look again next round
            await anyio.sleep(1.0)  # the soak's pacing between two looks at the pending rows

    async def _decide_http(self, execution_id: str) -> bool:
        def post() -> int:
            request = urllib.request.Request(
                f"http://127.0.0.1:{self.port}/api/executions/{quote(execution_id, safe='')}/resume",
                data=b'{"approved": true, "metadata": {"approver": "soak"}}', method="POST",
                headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=15) as answer:
                    return int(answer.status)
            except urllib.error.HTTPError as exc:
                return exc.code
            except OSError:
                return 0

        status = await anyio.to_thread.run_sync(post)
        self.tally[f"http_{status}"] += 1
        return status in (202, 409)  # 409: already claimed, which a worker's recovery may do meanwhile

    async def _decide_cli(self, execution_id: str) -> bool:
        with anyio.move_on_after(120):
            done = await anyio.run_process(
                [sys.executable, "-m", "tether.runtime.ops", "--store", self.url, "resume", execution_id,
                 "--set", "approved=true", "--set", "metadata.approver=soak-cli", "--detach"],
                cwd=ROOT, env=self.env, check=False)
            self.tally[f"cli_exit_{done.returncode}"] += 1
            return done.returncode == 0 or b"already" in (done.stderr or b"").lower()
        self.tally["cli_timeout"] += 1
        return False

    async def chaos(self, store: Store) -> None:
        while True:
            await anyio.sleep(self.rng.uniform(*KILL_EVERY))  # the next fault's moment, by design
            victims = self.killable()
            if not victims:
                continue
            victim = self.rng.choice(victims)
            try:
                held = sum(f":{victim.pid}:" in (e.lease_owner or "")
                           for e in await store.list_executions(status="running", limit=10_000))
            except StoreError:
                held = 0  # the server is restarting: the kill goes ahead uncounted
            victim.kill()
            self.killed.add(victim.pid)
            await anyio.to_thread.run_sync(victim.wait)
            self.tally["kills"] += 1
            self.tally["kills_holding_executions"] += held > 0
            self.tally["executions_interrupted_by_kills"] += held
            self.start_worker()  # on SQLite only after the victim is gone: it held the worker lock

    async def supervise(self) -> None:
        """Restart a worker that exited by itself, as systemd would (Restart=on-failure)."""
        while True:
            for proc in list(self.workers):
                if proc.poll() is not None and proc.pid not in self.killed and proc.pid not in self.exited:
                    self.exited.add(proc.pid)
                    self.tally[f"worker_exited_by_itself_{proc.returncode}"] += 1
                    if proc is self.anchor:
                        self.tally["anchor_worker_died"] += 1  # fails the soak: it must live throughout
                    else:
                        self.start_worker()
            await anyio.sleep(1.0)  # the watchdog's period (a service manager's RestartSec)

    async def postgres_restarts(self) -> None:
        assert self.restart_postgres is not None
        restart = self.restart_postgres
        while True:
            await anyio.sleep(self.duration / 6)  # the restart cadence, by design
            await anyio.to_thread.run_sync(lambda: restart(PG_DOWN))
            self.tally["postgres_restarts"] += 1

    async def sampler(self, every: float) -> None:
        processes = {"serve": self.serve, "worker": self.anchor}
        with (self.out / "samples.csv").open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["store", "t", "process", "pid", "rss_kb", "fds"])
            while True:
                t = round(self.elapsed(), 1)
                for name, proc in processes.items():
                    if proc is None or (sample := _sample(proc.pid)) is None:
                        continue
                    row = {"store": self.kind, "t": t, "process": name, "pid": proc.pid,
                           "rss_kb": sample[0], "fds": sample[1]}
                    self.samples.append(row)
                    writer.writerow(row.values())
                handle.flush()
                await anyio.sleep(every)  # the sampling period

    async def drain(self, store: Store) -> list[Execution]:
        """Wait, against a deadline, until every execution completed; return what is there by then.

        The decider goes on deciding meanwhile, and the workers fire the last timers and
        deadlines. Whatever is still paused at the deadline is accounted for by its pending row.
        """
        rows: list[Execution] = []
        with anyio.move_on_after(DRAIN):
            while True:
                with contextlib.suppress(StoreError):
                    rows = await store.list_executions(limit=1_000_000)
                    if len(rows) == len(self.started) and all(e.status == "completed" for e in rows):
                        return rows
                await anyio.sleep(1.0)  # a look at the store each second, until the deadline
        return await store.list_executions(limit=1_000_000)

    async def run(self) -> dict[str, Any]:
        self.t0 = time.monotonic()
        async with open_store(self.url) as store:
            for runner in BY_KIND.values():
                runner.store = store
            await store.setup()
            self.start_serve()
            # Postgres: three workers, the first never killed. SQLite: its one worker process.
            self.anchor = self.start_worker() if self.kind == "postgres" else None
            while len(self.workers) < (3 if self.kind == "postgres" else 1):
                self.start_worker()
            every = min(10.0, max(1.0, self.duration / 300))  # about 300 samples a run
            async with anyio.create_task_group() as tg:
                tg.start_soon(self.sampler, every)
                tg.start_soon(self.decider, store)
                tg.start_soon(self.supervise)
                with anyio.move_on_after(self.duration):
                    async with anyio.create_task_group() as faults:
                        faults.start_soon(self.starter, store)
                        faults.start_soon(self.chaos, store)
                        if self.restart_postgres is not None:
                            faults.start_soon(self.postgres_restarts)
                self.tally["faults_ended_at"] = round(self.elapsed())
                # The chaos may have been stopped between a kill and its replacement.
                while sum(p.poll() is None for p in self.workers) < (3 if self.kind == "postgres" else 1):
                    self.start_worker()
                rows = await self.drain(store)
                self.tally["drained_at"] = round(self.elapsed())
                tg.cancel_scope.cancel()
            pending = await store.list_pending(limit=1_000_000)
            journals = {e.execution_id: await store.read_journal(e.execution_id) for e in rows}
        return self.account(rows, pending, journals)

    def account(self, rows: list[Execution], pending: list[Any], journals: dict[str, list[Any]]) -> dict[str, Any]:
        with sqlite3.connect(self.effects) as db:
            charges = Counter(execution for (execution,) in db.execute("SELECT execution FROM effects"))
            keys = Counter(key for (key,) in db.execute("SELECT key FROM effects"))
            attempts = Counter(key for (key,) in db.execute("SELECT key FROM attempts"))
        waiting = {p.execution_id for p in pending}
        by_id = {e.execution_id: e for e in rows}
        outcomes: Counter[str] = Counter()
        problems: list[str] = []
        for execution_id, kind in self.started.items():
            e = by_id.get(execution_id)
            status = e.status if e else "missing"
            outcomes[f"{kind}:{status}"] += 1
            if e is None:
                problems.append(f"{execution_id}: missing")
                continue
            ends = sum(j.label == "completed" and j.path == e.root_path for j in journals[execution_id])
            if status == "completed" and (ends != 1 or charges[execution_id] != 1):
                problems.append(f"{execution_id}: completed with {ends} ends and {charges[execution_id]} charges")
            elif status == "paused" and (execution_id not in waiting or charges[execution_id]):
                problems.append(f"{execution_id}: paused, pending row {execution_id in waiting}, "
                                f"{charges[execution_id]} charges")
            elif status not in ("completed", "paused"):
                problems.append(f"{execution_id}: {status} ({e.error})")
        strays = set(charges) - set(self.started)
        problems += [f"{execution_id}: charged, never started" for execution_id in strays]
        return {
            "store": self.kind, "duration_s": self.duration, "wall_s": round(self.elapsed()), "seed": self.seed,
            "started": dict(Counter(self.started.values())), "outcomes": dict(sorted(outcomes.items())),
            "decided": dict(Counter(self.decided.values())), "tally": dict(self.tally),
            "charges": sum(charges.values()), "keys_written_twice": sum(n > 1 for n in keys.values()),
            "keys_attempted_twice": sum(n > 1 for n in attempts.values()),
            "flat": flatness(self.samples), "problems": problems[:50], "problem_count": len(problems),
        }


def flatness(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Each long-lived process's RSS and fds: the median of 20-40 % of the run against the last 20 %.

    The first 20 % is warm-up (imports finish, pools and caches fill, the
    allocator's arenas reach their working size), so the baseline starts after it.
    Medians, so a GC cycle or a burst of decisions at one sample does not decide it.
    """
    report: dict[str, Any] = {}
    for name in sorted({s["process"] for s in samples}):
        mine = [s for s in samples if s["process"] == name]
        n = len(mine)
        if n < 10:
            continue
        early, late = mine[n // 5: 2 * n // 5], mine[-(n // 5):]
        report[name] = {
            "samples": n,
            "rss_kb_first": mine[0]["rss_kb"], "rss_kb_last": mine[-1]["rss_kb"],
            "rss_kb_early": statistics.median(s["rss_kb"] for s in early),
            "rss_kb_late": statistics.median(s["rss_kb"] for s in late),
            "rss_kb_max": max(s["rss_kb"] for s in mine),
            "fds_first": mine[0]["fds"], "fds_last": mine[-1]["fds"],
            "fds_early": statistics.median(s["fds"] for s in early),
            "fds_late": statistics.median(s["fds"] for s in late),
            "fds_max": max(s["fds"] for s in mine),
        }
    return report


@pytest.fixture
def private_postgres() -> Iterator[tuple[str, Callable[[float], None]]]:
    """A Postgres server of the soak's own, and a function that restarts it after a time down."""
    with restartable_server() as server:
        yield server


def _out(store: str, duration: float, tmp_path: Path) -> Path:
    base = os.environ.get("TETHER_SOAK_OUT")
    out = (Path(base) / f"{store}-{int(duration)}s") if base else tmp_path / "soak"
    out.mkdir(parents=True, exist_ok=True)
    for stale in ("effects.db", "effects.db-wal", "effects.db-shm", "samples.csv", "summary.json"):
        (out / stale).unlink(missing_ok=True)
    return out


def soak(store: str, duration: float, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    out = _out(store, duration, tmp_path)
    if store == "postgres":
        url, restart = request.getfixturevalue("private_postgres")
        run = Soak(store, url, out, duration, restart_postgres=restart)
    else:
        run = Soak(store, f"sqlite:///{tmp_path / 'soak.db'}", out, duration)
    prepare(str(run.effects))
    try:
        summary = anyio.run(run.run)
    finally:
        exits = {}
        for name, proc in (("serve", run.serve), *((f"worker-{n}", p) for n, p in enumerate(run.workers))):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    exits[name] = proc.wait(timeout=60)
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    summary["exits_on_stop"] = exits
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))

    assert summary["problem_count"] == 0, summary["problems"]
    assert summary["keys_written_twice"] == 0
    assert "anchor_worker_died" not in summary["tally"]
    # The survivors stop cleanly: a worker exits 0 (docs/fleet.md); uvicorn shuts `tether serve`
    # down gracefully and then re-raises the SIGTERM it caught, as a process killed by it.
    assert {name: code for name, code in exits.items() if code != (-signal.SIGTERM if name == "serve" else 0)} == {}
    for name, figures in summary["flat"].items():
        # 20 % of RSS: an allocator keeps freed arenas and a GC generation can hold a few MB
        # at any one time; a leak of even 1 kB an execution shows as several MB over thousands.
        assert figures["rss_kb_late"] <= figures["rss_kb_early"] * 1.2, (name, figures)
        # Pools reconnect after a Postgres restart and HTTP keeps a few sockets: a handful
        # of fds may come and go; a leak of one per execution, decision or restart would not fit.
        assert figures["fds_late"] <= figures["fds_early"] + 8, (name, figures)


STORES = ["sqlite", "postgres"]


@pytest.mark.soak
@pytest.mark.timeout(DURATION + DRAIN + 600)
@pytest.mark.parametrize("store", STORES)
def test_soak(store: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    soak(store, DURATION, request, tmp_path)


@pytest.mark.torture
@pytest.mark.timeout(TORTURE_DURATION + DRAIN + 600)
@pytest.mark.parametrize("store", STORES)
def test_soak_ten_minutes(store: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    soak(store, TORTURE_DURATION, request, tmp_path)
