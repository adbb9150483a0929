"""A tether store of a million executions, for `bench.scale`: the rows, and their bulk load.

The schema is the store's own: the caller opens a `SQLiteStore` or `PostgresStore`
first, so its migrations create every table and index. Only the rows are written
here, with the raw driver, because a million `start_execution` calls would take an
hour. Every column holds what the store itself writes there:

- times: SQLite integer microseconds since the epoch (``stores/_sqlite/rows.py``),
  Postgres ``timestamptz``;
- JSON: compact text (the store's encoder: no spaces, ASCII escapes), including
  ``'null'`` where the store encodes a None (the result of a failed run, the
  default of an interrupt that has none): SQL NULL only where the store leaves the
  column NULL;
- Postgres's ``next_seq``: one past the journal's last entry, as the store keeps it.

The mix (for the default million, and in proportion for other sizes): 50,000
paused executions, each waiting at one interrupt; 1% running under a lease (2% of
those expired, a dead worker's); 0.2% queued and 0.1% decided (ready for a
worker); 4% failed, 1.5% cancelled, 0.5% timed out; the rest completed. Twelve
runners with 25 members each make 300 interrupt prefixes
(``supervisor:planner/worker:auditor/``), popular ones far more than rare ones.
Creation times spread over 180 days; paused runs wait from the last 60 days,
running and queued ones started in the last hour. Each execution has the journal
its status implies: 2 to 5 entries (inbox, a step, a snapshot and the suspension,
the decision, the verdict), 3.9 on average; queued ones have none.

Rows come in time order, as a live store inserts them. The secondary indexes are
dropped for the load and created again from their own definitions (faster than
maintaining them row by row, and the same indexes). Postgres then gets ``VACUUM
ANALYZE``, as autovacuum would give a table this old; SQLite gets no ``ANALYZE``,
since the store never runs one: its planner sees the file as a user's would.
"""

from __future__ import annotations

import hashlib
import json
import random
import sqlite3
import time
from bisect import bisect
from collections import Counter
from dataclasses import dataclass, field
from itertools import accumulate
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

    import asyncpg

_SECOND = 1_000_000  # times are integer microseconds since the epoch throughout
_HOUR = 3600 * _SECOND
_DAY = 24 * _HOUR
_BATCH = 20_000  # executions per batch of rows: one COPY each, or one executemany

# The store's own JSON text: compact, ASCII-escaped (stores/_json.py).
_encode = json.JSONEncoder(ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode

# Columns in the order the rows below are built; Postgres has next_seq besides.
EXECUTION_COLUMNS = (
    "id", "runner", "root_path", "fingerprint", "status", "input", "result", "error", "lease_owner",
    "lease_expires_at", "lease_epoch", "created_at", "updated_at", "wake_at", "version", "deadline", "cancel",
    "thread", "trace", "queue", "queue_key", "priority", "admitted_at",
)
JOURNAL_COLUMNS = ("execution_id", "seq", "path", "label", "kind", "payload", "created_at")
PENDING_COLUMNS = ("execution_id", "path", "reason", "context", "seq", "created_at", "deadline", "default_value")

_MEMBERS = ("auditor", "payer", "planner", "reviewer", "writer", "researcher", "scheduler", "notifier",
            "translator", "summarizer", "validator", "router", "pricer", "archivist", "tagger", "ranker",
            "fetcher", "critic", "editor", "checker", "billing", "shipping", "support", "fraud", "ledger")
_TOOLS = ("approve_refund", "issue_payment", "send_email", "escalate", "publish", "delete_account")
_STEPS = ("charge", "lookup_order", "fetch_profile", "draft_reply", "score_risk")


@dataclass(frozen=True)
class Runner:
    """One root actor: its path, the class name stored as ``runner``, how its members are named."""

    root_path: str
    runner: str
    member_kind: str
    versions: tuple[str, ...]
    threaded: float
    """The share of its runs that belong to a conversation (a thread)."""


RUNNERS = (
    Runner("supervisor:planner", "Supervisor", "worker", ("v1", "v2", "v3", "v4"), 0.05),
    Runner("agent:support", "Agent", "agent", ("v1", "v2", "v3"), 0.6),
    Runner("chain:refund", "Chain", "node", ("v1", "v2", "v3", "v4", "v5"), 0.0),
    Runner("swarm:content", "Swarm", "agent", ("v1", "v2"), 0.1),
    Runner("chain:triage", "Chain", "node", ("",), 0.0),
    Runner("agent:sales", "Agent", "agent", ("v1", "v2"), 0.6),
    Runner("supervisor:claims", "Supervisor", "worker", ("v1", "v2", "v3"), 0.05),
    Runner("chain:kyc", "Chain", "node", ("v1", "v2"), 0.0),
    Runner("agent:research", "Agent", "agent", ("",), 0.6),
    Runner("chain:invoice", "Chain", "node", ("v1", "v2", "v3"), 0.0),
    Runner("swarm:pricing", "Swarm", "agent", ("",), 0.1),
    Runner("supervisor:onboarding", "Supervisor", "worker", ("v1",), 0.05),
)
# Popularity falls off with rank (Zipf-like): the first runner has ~9x the runs of the last,
# the first member of a runner ~25x the interrupts of its last.
_RUNNER_WEIGHTS = list(accumulate(1 / (rank + 1) ** 0.9 for rank in range(len(RUNNERS))))
_MEMBER_WEIGHTS = list(accumulate(1 / (rank + 1) for rank in range(len(_MEMBERS))))


@dataclass(frozen=True)
class Shape:
    """How big a store to make. The shares of each status are fixed; ``pending`` is a count."""

    executions: int = 1_000_000
    pending: int = 50_000
    span_days: int = 180
    seed: int = 11

    def counts(self) -> dict[str, int]:
        """Executions of each status, adding up to ``executions``."""
        n = self.executions
        counts = {"paused": self.pending, "running": n // 100, "queued": n // 500, "decided": n // 1000,
                  "failed": n * 4 // 100, "cancelled": n * 15 // 1000, "timed_out": n // 200}
        counts["completed"] = n - sum(counts.values())
        if counts["completed"] < n // 4:
            raise ValueError(f"{self.pending:,} paused of {n:,} executions leaves too few finished ones; "
                             f"ask for at most {n // 2:,} pending.")
        return counts


@dataclass
class Sample:
    """What the measurement needs to know of the data without scanning it: ids, targets, the cutoff."""

    now_us: int
    ids: list[tuple[str, str, str, str]] = field(default_factory=list)
    """Every 200th execution, in creation order: (id, status, root path, version)."""
    paused: list[tuple[str, str]] = field(default_factory=list)
    """Every paused execution and the path of its one pending interrupt, oldest first."""
    prefixes: Counter[str] = field(default_factory=Counter)
    """Pending interrupts under each runner (``root/``) and each member (``root/kind:name/``)."""
    prune_cutoff_us: int = 0
    """A time before which about 1% of the executions were last updated (all of them finished)."""
    journal_rows: int = 0
    counts: dict[str, int] = field(default_factory=dict)


@dataclass
class Batch:
    """Rows of a run of consecutive executions, ready for the driver."""

    executions: list[tuple[Any, ...]] = field(default_factory=list)
    entries: list[int] = field(default_factory=list)
    """How many journal entries each execution has (Postgres's next_seq is one more)."""
    journal: list[tuple[Any, ...]] = field(default_factory=list)
    pending: list[tuple[Any, ...]] = field(default_factory=list)


def _schedule(shape: Shape, rng: random.Random, now: int) -> list[tuple[int, str]]:
    """Each execution's creation time and status, in creation order.

    Finished runs are spread over the whole span; what waits or runs started
    lately (paused runs within 60 days, the recent ones more often).
    """
    span = shape.span_days * _DAY
    windows = {"paused": 60 * _DAY, "running": _HOUR, "queued": 10 * 60 * _SECOND, "decided": _DAY}
    moments: list[tuple[int, str]] = []
    for status, count in shape.counts().items():
        window = windows.get(status)
        for _ in range(count):
            back = int(span * rng.random()) if window is None else int(window * rng.random() ** 2)
            moments.append((now - back, status))
    moments.sort()
    return moments


class Generator:
    """The rows of a store of ``shape``, made batch by batch (deterministic for a seed).

    ``batches()`` yields them in creation order; ``sample`` fills as they go.
    """

    def __init__(self, shape: Shape, now_us: int | None = None) -> None:
        self.shape = shape
        self.rng = random.Random(shape.seed)
        self.sample = Sample(now_us=now_us or time.time_ns() // 1000, counts=shape.counts())
        self._fingerprints = {(r.root_path, v): hashlib.sha256(f"{r.root_path}@{v}".encode()).hexdigest()[:16]
                              for r in RUNNERS for v in r.versions}
        # Threads: a conversation lasts a few hours; about four runs each.
        threaded = sum(s * r for s, r in zip(_runner_shares(), (r.threaded for r in RUNNERS), strict=True))
        buckets = max(1, shape.span_days * 4)
        self._threads_per_bucket = max(1, int(shape.executions * threaded / buckets / 4))

    def batches(self) -> Iterator[Batch]:
        schedule = _schedule(self.shape, self.rng, self.sample.now_us)
        cutoff_at = len(schedule) // 100
        batch = Batch()
        for position, (created, status) in enumerate(schedule):
            self._execution(batch, position, created, status)
            if position == cutoff_at:
                # The first 1% are all finished (nothing that waits is that old), and each was
                # updated within minutes of its creation: the cutoff covers about them.
                self.sample.prune_cutoff_us = created
            if len(batch.executions) == _BATCH:
                yield batch
                batch = Batch()
        if batch.executions:
            yield batch

    def _execution(self, batch: Batch, position: int, created: int, status: str) -> None:
        rng = self.rng
        runner = RUNNERS[bisect(_RUNNER_WEIGHTS, rng.random() * _RUNNER_WEIGHTS[-1])]
        version = self._version(runner, created)
        execution_id = f"run-{rng.getrandbits(48):012x}{position:06x}"
        order, amount = f"ord-{rng.randrange(10**7):07d}", round(rng.uniform(5, 900), 2)
        request = {"order": order, "amount": amount, "customer": f"cus-{rng.randrange(10**6):06d}",
                   "note": "refund requested after a late delivery"}
        member = f"{runner.root_path}/{runner.member_kind}:{_MEMBERS[self._member()]}"
        interrupt = f"{member}/tool:{rng.choice(_TOOLS)}"
        journal, updated = self._journal(execution_id, runner.root_path, member, interrupt, status, created, request)
        row = self._row(execution_id, runner, version, status, created, updated, request)
        if status == "paused":
            pending = self._pending(execution_id, interrupt, updated, order, amount)
            batch.pending.append(pending)
            if pending[6] is not None:  # a deadline: a worker takes the run up then (wake_at)
                row = (*row[:13], pending[6], *row[14:])
            self.sample.paused.append((execution_id, interrupt))
            self.sample.prefixes.update((f"{runner.root_path}/", f"{member}/"))
        batch.executions.append(row)
        batch.entries.append(len(journal))
        batch.journal += journal
        self.sample.journal_rows += len(journal)
        if position % 200 == 0:
            self.sample.ids.append((execution_id, status, runner.root_path, version))

    def _member(self) -> int:
        return bisect(_MEMBER_WEIGHTS, self.rng.random() * _MEMBER_WEIGHTS[-1])

    def _version(self, runner: Runner, created: int) -> str:
        """Newer runs on newer versions: each version in turn over the span, with overlap."""
        versions = runner.versions
        age = (self.sample.now_us - created) / (self.shape.span_days * _DAY)
        index = int((1 - age) * len(versions) + self.rng.random() - 0.5)
        return versions[min(len(versions) - 1, max(0, index))]

    def _row(self, execution_id: str, runner: Runner, version: str, status: str, created: int, updated: int,
             request: dict[str, Any]) -> tuple[Any, ...]:
        """The execution's row, as `start_execution` and the writes after it leave it."""
        rng = self.rng
        now = self.sample.now_us
        final = status in ("completed", "failed", "cancelled", "timed_out")
        result = None
        if final:  # release_lease stores the result of a final status, None as 'null'
            result = _encode({"order": request["order"], "refunded": request["amount"], "by": "auto"}
                             if status == "completed" else None)
        error = {"failed": "RuntimeError: payment gateway returned 502 after 3 attempts",
                 "cancelled": "Cancelled by cli:alice: duplicate order",
                 "timed_out": "Timed out: its deadline passed before it finished"}.get(status)
        lease_owner = lease_expires = None
        if status == "running":
            lease_owner = f"worker-{rng.randrange(8)}:{rng.randrange(1000, 60000)}:{rng.getrandbits(32):08x}"
            # A live lease is renewed every few seconds; 2% were left by a worker that died.
            lease_expires = now - rng.randrange(60 * _SECOND) if rng.random() < 0.02 else now + 30 * _SECOND
        epoch = {"queued": 0, "decided": 1}.get(status, 1 if rng.random() < 0.95 else 2)
        wake = {"queued": created, "decided": updated}.get(status)
        thread = None
        if rng.random() < runner.threaded:
            bucket = created // (6 * _HOUR)
            thread = f"chat-{bucket:06d}-{rng.randrange(self._threads_per_bucket):04d}"
        trace = f"00-{rng.getrandbits(128):032x}-{rng.getrandbits(64):016x}-01" if rng.random() < 0.3 else None
        deadline = created + _HOUR if rng.random() < 0.02 else None
        return (execution_id, runner.runner, runner.root_path, self._fingerprints[runner.root_path, version],
                status, _encode(request), result, error, lease_owner, lease_expires, epoch, created, updated,
                wake, version, deadline, None, thread, trace, None, None, 0, None)

    def _journal(self, execution_id: str, root: str, member: str, interrupt: str, status: str, created: int,
                 request: dict[str, Any]) -> tuple[list[tuple[Any, ...]], int]:
        """The journal the status implies, and when the execution was last updated.

        Entries are what the runtime writes: the root's inbox, a member's step, the
        suspending member's snapshot and suspension, the decision a claim journals,
        and the verdict at the root (``stores/_models.py`` names their kinds).
        """
        rng = self.rng
        if status == "queued":
            return [], created
        at = created
        entries: list[tuple[str, str, str, Any]] = [(root, "inbox", "entry", {"message": request, "id": None})]
        step = {"inbox": 1, "step": rng.choice(_STEPS), "result": {"ok": True, "ref": f"tx-{rng.getrandbits(32):08x}"}}
        if status in ("completed", "failed", "running"):
            entries.append((member, "step", "entry", step))
        if status == "completed":
            output = {"order": request["order"], "refunded": request["amount"], "by": "auto"}
            entries += [(root, "msg:1", "entry", {"inbox": 1, "delta": {"set": {"status": "done"}},
                                                  "finish": {"output": output}}),
                        (root, "completed", "entry", {"output": output})]
        elif status == "failed":
            entries.append((root, "failed", "entry", {"error": "RuntimeError: payment gateway returned 502"}))
        elif status == "cancelled":
            entries.append((root, "cancelled", "entry", {"by": "cli:alice", "reason": "duplicate order"}))
        elif status == "timed_out":
            entries.append((root, "timed_out", "entry", {"deadline": "an hour after it started"}))
        elif status in ("paused", "decided"):
            asked = {"inbox": 1, "path": interrupt, "expect": "Approval", "reason": "approval",
                     "context": f"{rng.getrandbits(48):012x}"}
            entries += [(member, "snapshot", "snapshot", {"set": {"order": request["order"], "stage": "approve"}}),
                        (member, "suspended", "suspended", asked),
                        (root, "paused", "entry", {"pending": [interrupt], "wake_at": None})]
            if status == "decided":
                entries.append((interrupt, "resumed", "resumed", {"value": {"approved": True}, "suspended_seq": 3,
                                                                  "reason": "approval", "by": "cli:alice"}))
        rows = []
        for seq, (path, label, kind, payload) in enumerate(entries, start=1):
            # A boundary every few hundred ms; a decision comes minutes to hours later.
            at += rng.randrange(50_000, 2 * _SECOND) if label != "resumed" else rng.randrange(_HOUR)
            rows.append((execution_id, seq, path, label, kind, _encode(payload), at))
        if status == "running":
            at = max(at, self.sample.now_us - rng.randrange(5 * _SECOND))
        return rows, min(at, self.sample.now_us)

    def _pending(self, execution_id: str, path: str, suspended_at: int, order: str,
                 amount: float) -> tuple[Any, ...]:
        """The interrupt a paused run waits at; its ``seq`` is the journal's ``suspended`` entry (3)."""
        rng = self.rng
        context = _encode({"order": order, "amount": amount, "question": f"Refund {amount:.2f} EUR for {order}?"})
        deadline = default = None
        if rng.random() < 0.1:  # asked with patience: a worker decides it with the default at its deadline
            deadline, default = suspended_at + 3 * _DAY, _encode({"approved": False})
        return (execution_id, path, "approval", context, 3, suspended_at, deadline,
                _encode(None) if default is None else default)


def _runner_shares() -> list[float]:
    weights = [b - a for a, b in zip([0.0, *_RUNNER_WEIGHTS], _RUNNER_WEIGHTS, strict=False)]
    total = sum(weights)
    return [w / total for w in weights]


@dataclass
class Load:
    """What a load took (seconds) and what it left (bytes per table and index)."""

    seconds: dict[str, float]
    sample: Sample
    sizes: list[tuple[str, str, int]]
    """(table, index or '' for the table itself, bytes)."""

    def report(self) -> str:
        counts = self.sample.counts
        lines = [(f"{sum(counts.values()):,} executions ({', '.join(f'{s} {c:,}' for s, c in counts.items())}), "
                 f"{self.sample.journal_rows:,} journal entries, {len(self.sample.paused):,} pending interrupts"),
                 "load: " + ", ".join(f"{step} {s:.1f} s" for step, s in self.seconds.items())]
        for table in dict.fromkeys(t for t, _, _ in self.sizes):
            own = [(index, size) for t, index, size in self.sizes if t == table]
            data = sum(size for index, size in own if not index)
            indexes = [(index, size) for index, size in own if index]
            lines.append(f"  {table}: {_mb(data)} table, {_mb(sum(s for _, s in indexes))} in "
                         f"{len(indexes)} indexes")
            lines += [f"      {index}: {_mb(size)}" for index, size in indexes]
        return "\n".join(lines)


def _mb(size: int) -> str:
    return f"{size / 2**20:,.1f} MiB"


# -- SQLite ---------------------------------------------------------------------


def load_sqlite(path: str, shape: Shape) -> Load:
    """Fill the SQLite file at ``path`` (its schema made already by `SQLiteStore`)."""
    generator = Generator(shape)
    db = sqlite3.connect(path, isolation_level=None)
    try:
        # A bulk load that a crash may lose: the file is thrown away with the run anyway.
        db.execute("PRAGMA synchronous=OFF")
        indexes = db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL "
                             "AND name LIKE 'tether%'").fetchall()
        for name, _ in indexes:
            db.execute(f'DROP INDEX "{name}"')
        seconds: dict[str, float] = {}
        started = time.perf_counter()
        for batch in generator.batches():
            _insert_sqlite(db, batch)
        seconds["generate and insert"] = time.perf_counter() - started
        started = time.perf_counter()
        for _, sql in indexes:
            db.execute(sql)
        seconds["indexes"] = time.perf_counter() - started
        # Fold the load into the file: the measured part should not start with a huge WAL.
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return Load(seconds, generator.sample, _sqlite_sizes(db))
    finally:
        db.close()


def _insert_sqlite(db: sqlite3.Connection, batch: Batch) -> None:
    """One transaction per batch: 20,000 executions with their journals and interrupts."""
    marks = ", ".join("?" for _ in EXECUTION_COLUMNS)
    db.execute("BEGIN")
    db.executemany(f"INSERT INTO tether_executions ({', '.join(EXECUTION_COLUMNS)}) VALUES ({marks})",
                   batch.executions)
    db.executemany(f"INSERT INTO tether_journal ({', '.join(JOURNAL_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                   batch.journal)
    db.executemany(f"INSERT INTO tether_pending ({', '.join(PENDING_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                   batch.pending)
    db.execute("COMMIT")


def _sqlite_sizes(db: sqlite3.Connection) -> list[tuple[str, str, int]]:
    """Bytes of each tether table and index, from the ``dbstat`` table of pages."""
    owners = dict(db.execute("SELECT name, tbl_name FROM sqlite_master WHERE name LIKE 'tether%' "
                             "OR name LIKE 'sqlite_autoindex_tether%'"))
    sizes = []
    for name, size in db.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY name"):
        table = owners.get(name)
        if table in ("tether_executions", "tether_journal", "tether_pending"):
            sizes.append((table, "" if name == table else name, int(size)))
    return sorted(sizes)


# -- Postgres -------------------------------------------------------------------

# Postgres counts time from 2000-01-01; asyncpg's "tuple" format for timestamptz is
# (microseconds since then,), which spares making a datetime for each of ~5M values.
_PG_EPOCH_US = 946_684_800 * _SECOND


def _pg_time(us: int) -> tuple[int]:
    return (us - _PG_EPOCH_US,)


def _pg_time_back(value: tuple[int]) -> int:
    return value[0] + _PG_EPOCH_US


async def load_postgres(conn: asyncpg.Connection, schema: str, shape: Shape) -> Load:
    """Fill ``schema`` (its tables made already by `PostgresStore`) over ``conn``, by binary COPY."""
    generator = Generator(shape)
    await conn.execute(f'SET search_path = "{schema}"')
    await conn.set_type_codec("timestamptz", schema="pg_catalog", encoder=_pg_time, decoder=_pg_time_back,
                              format="tuple")
    # tether's triggers only notify listeners (workers, followers): nobody listens to a load,
    # and skipping them changes no row.
    await conn.execute("SET session_replication_role = replica")
    indexes = await conn.fetch(
        "SELECT i.indexname, i.indexdef FROM pg_indexes i WHERE i.schemaname = $1 "
        "AND i.tablename IN ('tether_executions', 'tether_journal', 'tether_pending') "
        "AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname)", schema)
    for index in indexes:
        await conn.execute(f'DROP INDEX "{index["indexname"]}"')
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    for batch in generator.batches():
        await _copy_postgres(conn, batch)
    seconds["generate and COPY"] = time.perf_counter() - started
    started = time.perf_counter()
    for index in indexes:
        await conn.execute(index["indexdef"])
    seconds["indexes"] = time.perf_counter() - started
    started = time.perf_counter()
    await conn.execute("VACUUM ANALYZE tether_executions, tether_journal, tether_pending")
    seconds["vacuum analyze"] = time.perf_counter() - started
    await conn.execute("RESET session_replication_role")
    return Load(seconds, generator.sample, await _postgres_sizes(conn, schema))


async def _copy_postgres(conn: asyncpg.Connection, batch: Batch) -> None:
    # Postgres still numbers entries with the execution's counter: one past the last entry.
    executions = [(*row, entries + 1) for row, entries in zip(batch.executions, batch.entries, strict=True)]
    async with conn.transaction():
        await conn.copy_records_to_table("tether_executions", records=executions,
                                         columns=[*EXECUTION_COLUMNS, "next_seq"])
        await conn.copy_records_to_table("tether_journal", records=batch.journal, columns=JOURNAL_COLUMNS)
        await conn.copy_records_to_table("tether_pending", records=batch.pending, columns=PENDING_COLUMNS)


async def _postgres_sizes(conn: asyncpg.Connection, schema: str) -> list[tuple[str, str, int]]:
    """Bytes of each tether table (with its TOAST) and each of its indexes."""
    rows = await conn.fetch(
        "SELECT t.relname AS tab, '' AS idx, pg_table_size(t.oid) AS size FROM pg_class t "
        "JOIN pg_namespace n ON n.oid = t.relnamespace WHERE n.nspname = $1 AND t.relkind = 'r' "
        "AND t.relname IN ('tether_executions', 'tether_journal', 'tether_pending') "
        "UNION ALL SELECT t.relname, i.relname, pg_relation_size(i.oid) FROM pg_index x "
        "JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid "
        "JOIN pg_namespace n ON n.oid = t.relnamespace WHERE n.nspname = $1 "
        "AND t.relname IN ('tether_executions', 'tether_journal', 'tether_pending') ORDER BY 1, 2", schema)
    return [(r["tab"], r["idx"], int(r["size"])) for r in rows]
