"""Executions for `bench.console`: a deterministic mix, and its bulk load into SQLite or Postgres.

The rows are what tether's stores write (read back by the stores' own code in
the benchmark): SQLite times as integer microseconds since the epoch, JSON as
compact text; Postgres times as timestamptz, JSON in json columns. The schema
comes from ``open_store(url, create=True)``; only the rows are inserted here,
with the raw driver, because going through the store one execution at a time
would take minutes for 100,000.
"""

from __future__ import annotations

import hashlib
import json
import random
import sqlite3
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_HOUR_US = 3600 * 1_000_000
_DAY_US = 24 * _HOUR_US
SPAN_DAYS = 30
VERSIONS = ("v1", "v2", "v3")
# root path -> (runner, the calls its paused runs wait at). The runner column holds the root
# actor's class name (`NewExecution.runner`), which is why the page filters by root path.
ROOTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "chain:refund": ("Chain", ("chain:refund/node:approve",)),
    "chain:triage": ("Chain", ("chain:triage/node:escalate",)),
    "supervisor:planner": ("Supervisor", ("supervisor:planner/worker:auditor/tool:approve_refund",
                                          "supervisor:planner/worker:payer/tool:issue_payment")),
    "agent:support": ("Agent", ("agent:support/tool:issue_credit",)),
    "swarm:content": ("Swarm", ("swarm:content/agent:editor/tool:publish",)),
}
STATUS_WEIGHTS = {"completed": 85.0, "failed": 5.0, "paused": 5.0, "running": 2.0, "queued": 1.0,
                  "cancelled": 1.5, "timed_out": 0.5}
THREAD_SHARE = 0.10
RUNS_PER_THREAD = 5
_COMPACT = json.JSONEncoder(separators=(",", ":")).encode  # as the stores write JSON


@dataclass(frozen=True)
class Execution:
    id: str
    runner: str
    root_path: str
    fingerprint: str
    status: str
    input: str
    result: str | None
    error: str | None
    lease_owner: str | None
    lease_expires_us: int | None
    lease_epoch: int
    created_us: int
    updated_us: int
    wake_us: int | None
    version: str
    thread: str | None


@dataclass(frozen=True)
class Pending:
    execution_id: str
    path: str
    reason: str
    context: str
    seq: int
    created_us: int


@dataclass
class Data:
    now_us: int
    executions: list[Execution]
    pending: list[Pending]
    id_width: int
    threads: dict[str, int] = field(default_factory=dict)
    """Each thread and how many runs it has."""


def moment(us: int) -> datetime:
    """A time in microseconds since the epoch as Postgres's driver takes it (exact, as SQLite's ``from_us``)."""
    return _EPOCH + timedelta(microseconds=us)


def generate(n: int, seed: int = 7) -> Data:
    """``n`` executions created over the last 30 days, and a pending call for each paused one."""
    rng = random.Random(seed)
    now = time.time_ns() // 1000
    width = max(6, len(str(n - 1)))
    # Ids numbered in a shuffled order, so an id prefix ("run-04217") picks ten runs spread in time.
    numbers = list(range(n))
    rng.shuffle(numbers)
    statuses, weights = list(STATUS_WEIGHTS), list(STATUS_WEIGHTS.values())
    roots = list(ROOTS)
    thread_count = max(1, int(n * THREAD_SHARE) // RUNS_PER_THREAD)
    executions: list[Execution] = []
    pending: list[Pending] = []
    threads: dict[str, int] = {}
    for number in numbers:
        root = rng.choice(roots)
        runner, waits_at = ROOTS[root]
        version = rng.choice(VERSIONS)
        status = rng.choices(statuses, weights)[0]
        # What is still running or queued started lately; the rest anywhere in the 30 days.
        recent = status in ("running", "queued")
        created = now - rng.randrange(2 * _HOUR_US if recent else SPAN_DAYS * _DAY_US)
        ran = rng.randrange(200_000, 120_000_000)
        updated = created if status == "queued" else min(now, created + ran)
        order = f"ord-{rng.randrange(10**6):06d}"
        amount = round(rng.uniform(5, 900), 2)
        thread = None
        if rng.random() < THREAD_SHARE:
            thread = f"chat-{rng.randrange(thread_count):05d}"
            threads[thread] = threads.get(thread, 0) + 1
        execution_id = f"run-{number:0{width}d}-{rng.getrandbits(24):06x}"
        executions.append(Execution(
            id=execution_id, runner=runner, root_path=root,
            fingerprint=hashlib.sha256(f"{root}@{version}".encode()).hexdigest()[:16], status=status,
            input=_COMPACT({"order": order, "amount": amount, "customer": f"cus-{rng.randrange(10**5):05d}",
                            "note": "refund requested after a late delivery"}),
            result=_COMPACT({"order": order, "refunded": amount, "by": "auto"}) if status == "completed" else None,
            error=("RuntimeError: payment gateway returned 502 after 3 attempts" if status == "failed"
                   else None),
            lease_owner=f"worker-{rng.randrange(4)}" if status == "running" else None,
            lease_expires_us=updated + 30_000_000 if status == "running" else None,
            lease_epoch=0 if status == "queued" else 1,
            created_us=created, updated_us=updated,
            wake_us=created if status == "queued" else None,
            version=version, thread=thread,
        ))
        if status == "paused":
            pending.append(Pending(
                execution_id=execution_id, path=rng.choice(waits_at), reason="approval",
                context=_COMPACT({"order": order, "amount": amount,
                                  "question": f"Refund {amount:.2f} EUR for {order}?"}),
                seq=rng.randrange(3, 12), created_us=updated,
            ))
    return Data(now_us=now, executions=executions, pending=pending, id_width=width, threads=threads)


_EXEC_COLUMNS = ("id", "runner", "root_path", "fingerprint", "status", "input", "result", "error", "lease_owner",
                 "lease_expires_at", "lease_epoch", "created_at", "updated_at", "wake_at", "version", "thread")
_PENDING_COLUMNS = ("execution_id", "path", "reason", "context", "seq", "created_at")


def _exec_row(e: Execution, when: Any) -> tuple[Any, ...]:
    return (e.id, e.runner, e.root_path, e.fingerprint, e.status, e.input, e.result, e.error, e.lease_owner,
            None if e.lease_expires_us is None else when(e.lease_expires_us), e.lease_epoch,
            when(e.created_us), when(e.updated_us), None if e.wake_us is None else when(e.wake_us),
            e.version, e.thread)


def _pending_row(p: Pending, when: Any) -> tuple[Any, ...]:
    return (p.execution_id, p.path, p.reason, p.context, p.seq, when(p.created_us))


def load_sqlite(path: str, data: Data) -> dict[str, float]:
    """Insert the rows in one transaction, then ANALYZE; seconds taken by each."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        # A bulk load that a crash may lose: the file is thrown away with the run anyway.
        db.execute("PRAGMA synchronous=OFF")
        started = time.perf_counter()
        db.execute("BEGIN")
        db.executemany(f"INSERT INTO tether_executions ({', '.join(_EXEC_COLUMNS)}) "
                       f"VALUES ({', '.join('?' for _ in _EXEC_COLUMNS)})",
                       (_exec_row(e, int) for e in data.executions))
        db.executemany(f"INSERT INTO tether_pending ({', '.join(_PENDING_COLUMNS)}) "
                       f"VALUES ({', '.join('?' for _ in _PENDING_COLUMNS)})",
                       (_pending_row(p, int) for p in data.pending))
        db.execute("COMMIT")
        inserted = time.perf_counter()
        db.execute("ANALYZE")
        # Fold the load into the file: the measured part should not start with a 60 MB WAL.
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return {"insert": inserted - started, "analyze": time.perf_counter() - inserted}
    finally:
        db.close()


async def load_postgres(dsn: str, data: Data) -> dict[str, float]:
    """COPY the rows in (asyncpg: asyncio only), then ANALYZE; seconds taken by each."""
    conn = await asyncpg.connect(dsn)
    try:
        started = time.perf_counter()
        async with conn.transaction():
            await conn.copy_records_to_table("tether_executions", columns=_EXEC_COLUMNS,
                                             records=[_exec_row(e, moment) for e in data.executions])
            await conn.copy_records_to_table("tether_pending", columns=_PENDING_COLUMNS,
                                             records=[_pending_row(p, moment) for p in data.pending])
        inserted = time.perf_counter()
        await conn.execute("ANALYZE tether_executions, tether_pending")
        return {"insert": inserted - started, "analyze": time.perf_counter() - inserted}
    finally:
        await conn.close()
