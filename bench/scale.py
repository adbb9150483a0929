"""The store's hot paths at a million executions, on SQLite and Postgres, with the plan of every query.

    python -m bench.scale [--executions 1000000] [--pending 50000] [--stores sqlite,postgres]
                          [--rounds 15] [--backend asyncio|trio] [--postgres DSN]

A fresh store per kind (a SQLite file in a temporary directory; a Postgres
database ``tether_bench_scale``, dropped at the end) gets its schema from
``open_store(url, create=True)``, then the rows of `bench._scale_data` by bulk
load: by default 1,000,000 executions and 50,000 pending interrupts under 300
path prefixes, with their journals. The load runs under asyncio; the measured
part on ``--backend``.

Each case is one store call as the runtime, a worker or the console makes it:
listing pending interrupts under a popular, a rare and a whole runner's prefix,
the next page of one, the deadline sweep, their counts; the console's executions
page (unfiltered, by status, by runner and version); the newest-updated list; a
worker's ``take_work``; a resume (``claim_and_lease`` of a paused run, the reload
of its journal, one ``append`` under the new lease, the ``release_lease`` that
completes it); and ``prune`` of 100 old executions. One warm-up round, then
``--rounds`` timed ones, the cases interleaved round by round; each round
resumes a different paused execution. Every call's result is checked (a listing
returns rows under its prefix, a claim returns a lease, a prune deletes rows).

During the warm-up round every SQL statement a case sends is recorded (asyncpg's
query logger and its prepared statements; SQLite's trace callback, which gives
the statement with its values) and explained afterwards: ``EXPLAIN`` on Postgres
with the values bound (the plan the statement gets on its first runs) and as a
generic plan (what a cached statement may switch to after five), ``EXPLAIN QUERY
PLAN`` on SQLite. A sequential scan of a tether table on Postgres, or a ``SCAN``
of one without an index on SQLite, is flagged.
"""

from __future__ import annotations

import argparse
import os
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import asyncpg
from asyncpg.prepared_stmt import PreparedStatement
from tether.stores import ExecutionSearch, Lease, NewEntry, PendingInterrupt, Store, open_store

from bench import _scale_data
from bench._options import add_store_options, chosen_stores
from bench._scale_data import Load, Sample, Shape
from bench._spread import formatted, spread

DATABASE = "tether_bench_scale"
OWNER = "bench-scale:1:0"

# --- what a case sends ----------------------------------------------------------------------------

_recording: list[tuple[str, tuple[Any, ...]]] | None = None
"""While a case runs in the warm-up round: every statement it sends, with its values."""


def _record(query: str, args: tuple[Any, ...] | list[Any]) -> None:
    if _recording is not None:
        _recording.append((query, tuple(args)))


def _postgres_logger(logged: Any) -> None:
    args = logged.args
    if args and isinstance(args[0], (list, tuple)):  # executemany: the first row's values
        args = args[0]
    _record(logged.query, args or ())


def record_statements() -> None:
    """Hook both drivers so that what the store sends reaches `_record`.

    asyncpg logs ``fetch``/``execute``/``executemany`` to a connection's query
    loggers but not a ``PreparedStatement``'s own runs, which are wrapped here;
    SQLite's trace callback gets each statement as run, with its values filled in.
    """
    connect = asyncpg.connect

    async def connect_logged(*args: Any, **kwargs: Any) -> asyncpg.Connection:
        conn = await connect(*args, **kwargs)
        conn.add_query_logger(_postgres_logger)
        return conn

    asyncpg.connect = connect_logged  # type: ignore[assignment]
    bind_execute = PreparedStatement._PreparedStatement__bind_execute  # type: ignore[attr-defined]

    async def bind_execute_logged(self: PreparedStatement, args: Any, limit: int, timeout: Any) -> Any:
        _record(self.get_query(), args)
        return await bind_execute(self, args, limit, timeout)

    PreparedStatement._PreparedStatement__bind_execute = bind_execute_logged  # type: ignore[attr-defined]
    sqlite_connect = sqlite3.connect

    def sqlite_connect_traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = sqlite_connect(*args, **kwargs)
        conn.set_trace_callback(lambda sql: _record(sql, ()))
        return conn

    sqlite3.connect = sqlite_connect_traced  # type: ignore[assignment]


# --- the cases ------------------------------------------------------------------------------------


@dataclass
class Case:
    name: str
    call: Callable[[], Awaitable[str]]
    """Makes the store call once, checks its result, and says what it returned ('100 rows')."""
    times: list[float] = field(default_factory=list)
    statements: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)
    returned: str = ""


def _rows(rows: list[Any], prefix: str | None = None) -> str:
    if prefix is not None:
        assert all(r.agent_path.startswith(prefix) for r in rows), f"a row outside {prefix!r}"
    return f"{len(rows)} rows"


class Resume:
    """One paused execution per round, carried through the resume cases in order."""

    def __init__(self, store: Store, paused: list[tuple[str, str]]) -> None:
        self.store = store
        self.targets = list(paused)
        self.current: tuple[str, str] | None = None
        self.lease: Lease | None = None

    async def claim(self) -> str:
        # The newest paused runs first: the ones an operator decides.
        self.current = self.targets.pop()
        execution_id, path = self.current
        entry, lease = await self.store.claim_and_lease(
            execution_id, {"approved": True}, owner=OWNER, lease_seconds=60, path=path, by="bench")
        assert lease is not None, "the resume took no lease"
        assert entry.label == "resumed", entry
        self.lease = lease
        return f"epoch {lease.epoch}"

    async def load(self) -> str:
        assert self.current is not None
        loaded = await self.store.load_execution(self.current[0])
        assert loaded is not None
        assert loaded[0].status == "running", loaded[0]
        return f"{len(loaded[1])} entries"

    async def append(self) -> str:
        assert self.current is not None
        assert self.lease is not None
        member = self.current[1].rpartition("/")[0]
        seqs = await self.store.append(self.lease, [NewEntry(
            path=member, label="step", payload={"inbox": 1, "step": "issue_refund", "result": {"ok": True}})])
        return f"seq {seqs[0]}"

    async def release(self) -> str:
        assert self.lease is not None
        await self.store.release_lease(self.lease, status="completed", result={"refunded": True})
        self.lease = None
        return "completed"


def cases(store: Store, sample: Sample) -> list[Case]:
    members = [(p, n) for p, n in sample.prefixes.most_common() if p.count("/") == 2]
    runners = [(p, n) for p, n in sample.prefixes.most_common() if p.count("/") == 1]
    popular, rare, runner = members[0][0], members[-1][0], runners[0][0]
    now = datetime.fromtimestamp(sample.now_us / 1e6, UTC)
    cutoff = datetime.fromtimestamp(sample.prune_cutoff_us / 1e6, UTC)
    some = sample.ids[len(sample.ids) // 3]
    version_runner = next(r for r in _scale_data.RUNNERS if len(r.versions) > 2)
    page: list[PendingInterrupt] = []
    resume = Resume(store, sample.paused)

    async def pending(prefix: str | None = None, **kwargs: Any) -> str:
        return _rows(await store.list_pending(path_prefix=prefix, limit=100, **kwargs), prefix)

    async def next_page() -> str:
        if not page:
            page.extend(await store.list_pending(path_prefix=popular, limit=100))
        rows = await store.list_pending(path_prefix=popular, limit=100, after=page[-1])
        assert not rows or rows[0].created_at >= page[-1].created_at, "the next page starts before this one ends"
        return _rows(rows, popular)

    async def due() -> str:
        rows = await store.list_pending(due_before=now, limit=100)
        assert all(r.deadline is not None and r.deadline <= now for r in rows)
        return _rows(rows)

    async def count(prefix: str | None) -> str:
        found = await store.count_pending(path_prefix=prefix)
        assert found == (sample.prefixes[prefix] if prefix else len(sample.paused)) - resumed(prefix), found
        return f"{found:,}"

    def resumed(prefix: str | None) -> int:
        # Paused runs the resume cases have completed by now.
        done = sample.paused[len(resume.targets):]
        return sum(1 for _, path in done if prefix is None or path.startswith(prefix))

    async def search(search: ExecutionSearch) -> str:
        rows = await store.search_executions(search, limit=51)
        assert rows, f"{search}: no executions"
        return f"{len(rows)} rows"

    async def recent() -> str:
        rows = await store.list_executions(recent=True, limit=50)
        assert len(rows) == 50
        return "50 rows"

    async def by_status() -> str:
        rows = await store.list_executions(status="paused", limit=100)
        assert len(rows) == 100
        assert all(r.status == "paused" for r in rows)
        return "100 rows"

    async def one() -> str:
        found = await store.get_execution(some[0])
        assert found is not None
        assert found.execution_id == some[0]
        return found.status

    async def take() -> str:
        leases = await store.take_work(owner=OWNER, lease_seconds=60, limit=1)
        assert len(leases) == 1, leases
        return "1 lease"

    async def prune() -> str:
        deleted = await store.prune(older_than=cutoff, limit=100)
        assert deleted > 0, "prune found nothing old"
        return f"{deleted} deleted"

    return [
        Case(f"list_pending({popular!r}), popular member", lambda: pending(popular)),
        Case(f"list_pending({rare!r}), rare member", lambda: pending(rare)),
        Case(f"list_pending({runner!r}), whole runner", lambda: pending(runner)),
        Case("list_pending(), everything", pending),
        Case("list_pending(popular, after=row 100): the next page", next_page),
        Case("list_pending(due_before=now): the deadline sweep", due),
        Case("count_pending(whole runner)", lambda: count(runner)),
        Case("count_pending()", lambda: count(None)),
        Case("search_executions(): the console's first page", lambda: search(ExecutionSearch())),
        Case("search_executions(status=paused)", lambda: search(ExecutionSearch(status="paused"))),
        Case(f"search_executions({version_runner.root_path}, version {version_runner.versions[1]})",
             lambda: search(ExecutionSearch(root_path=version_runner.root_path, version=version_runner.versions[1]))),
        Case("list_executions(recent=True)", recent),
        Case("list_executions(status=paused)", by_status),
        Case("get_execution(id)", one),
        Case("take_work(limit=1)", take),
        Case("claim_and_lease: a resume", resume.claim),
        Case("load_execution: the resumed run's journal", resume.load),
        Case("append(1 entry) under the new lease", resume.append),
        Case("release_lease(completed)", resume.release),
        Case("prune(older_than, limit=100)", prune),
    ]


async def measure(url: str, sample: Sample, rounds: int) -> list[Case]:
    global _recording
    store = open_store(url, create=False)
    async with store:
        plan = cases(store, sample)
        for r in range(1 + rounds):
            for case in plan:
                if r == 0:
                    _recording = case.statements
                try:
                    start = time.perf_counter()
                    case.returned = await case.call()
                    took = time.perf_counter() - start
                finally:
                    _recording = None
                if r:
                    case.times.append(took * 1000)
    return plan


# --- the plans ------------------------------------------------------------------------------------

_STATEMENT = re.compile(r"^\s*(WITH|SELECT|INSERT|UPDATE|DELETE)\b", re.IGNORECASE)
_LITERALS = re.compile(r"'(?:[^']|'')*'|\b\d+(?:\.\d+)?\b")


@dataclass
class Plan:
    query: str
    lines: list[str]
    flagged: list[str]
    generic: list[str] | None = None
    generic_flagged: list[str] = field(default_factory=list)


def distinct(statements: list[tuple[str, tuple[Any, ...]]]) -> list[tuple[str, tuple[Any, ...]]]:
    """The statements of a case that are queries, one of each shape (values aside)."""
    seen: dict[str, tuple[str, tuple[Any, ...]]] = {}
    for query, args in statements:
        if _STATEMENT.match(query):
            seen.setdefault(_LITERALS.sub("?", " ".join(query.split())), (query, args))
    return list(seen.values())


def sqlite_plans(path: str, plan: list[Case]) -> dict[str, list[Plan]]:
    db = sqlite3.connect(Path(path).absolute().as_uri() + "?mode=ro", uri=True)
    try:
        out: dict[str, list[Plan]] = {}
        for case in plan:
            out[case.name] = []
            for query, _ in distinct(case.statements):
                lines = [row[3] for row in db.execute("EXPLAIN QUERY PLAN " + query)]
                # A SCAN without an index reads a whole table; json_each and CTEs are not tables.
                flagged = [line for line in lines if re.match(r"SCAN tether_\w+( AS \w+)?$", line.strip())]
                out[case.name].append(Plan(query, lines, flagged))
        return out
    finally:
        db.close()


def _seq_scans(lines: list[str]) -> list[str]:
    return [line.strip() for line in lines if re.search(r"Seq Scan on tether_", line)]


async def postgres_plans(url: str, plan: list[Case]) -> dict[str, list[Plan]]:
    conn = await asyncpg.connect(url, statement_cache_size=0)
    try:
        out: dict[str, list[Plan]] = {}
        for case in plan:
            out[case.name] = []
            for query, args in distinct(case.statements):
                rows = await conn.fetch("EXPLAIN (COSTS OFF) " + query, *args)
                lines = [r[0] for r in rows]
                found = Plan(query, lines, _seq_scans(lines))
                if args:
                    found.generic = await generic_plan(conn, query, args)
                    found.generic_flagged = _seq_scans(found.generic or [])
                out[case.name].append(found)
        return out
    finally:
        await conn.close()


def _type_name(schema: str, name: str) -> str:
    """A type as SQL names it: asyncpg calls an array of text ``text[]``."""
    return f'"{schema}"."{name[:-2]}"[]' if name.endswith("[]") else f'"{schema}"."{name}"'


async def generic_plan(conn: asyncpg.Connection, query: str, args: tuple[Any, ...]) -> list[str] | None:
    """The plan a cached statement gets once Postgres prefers a generic one (None: it cannot be made here).

    ``EXECUTE`` takes its values as literals, so each value is quoted by the server
    as the type the statement's parameter has.
    """
    try:
        types = (await conn.prepare(query)).get_parameters()
        literals = [await conn.fetchval(f"SELECT quote_nullable($1::{_type_name(t.schema, t.name)})", arg)
                    for t, arg in zip(types, args, strict=True)]
        async with conn.transaction():
            await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            await conn.execute(f"PREPARE tether_bench_q AS {query}")
            rows = await conn.fetch(f"EXPLAIN (COSTS OFF) EXECUTE tether_bench_q({', '.join(literals)})")
    except (asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        print(f"no generic plan for {' '.join(query.split())[:80]}...: {exc}", file=sys.stderr)
        return None
    finally:
        if await conn.fetchval("SELECT count(*) FROM pg_prepared_statements WHERE name = 'tether_bench_q'"):
            await conn.execute("DEALLOCATE tether_bench_q")
    return [r[0] for r in rows]


# --- the stores' lifecycles -----------------------------------------------------------------------


def database_url(admin: str, name: str) -> str:
    base, _, query = admin.partition("?")
    return f"{base.rpartition('/')[0]}/{name}" + (f"?{query}" if query else "")


async def admin_execute(admin: str, *statements: str) -> None:
    conn = await asyncpg.connect(admin)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


async def make_schema(url: str) -> None:
    async with open_store(url, create=True):
        pass


async def load_postgres(admin: str, url: str, shape: Shape) -> Load:
    # WITH (FORCE): a run killed half-way leaves its database, and maybe a connection to it.
    await admin_execute(admin, f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)', f'CREATE DATABASE "{DATABASE}"')
    await make_schema(url)
    conn = await asyncpg.connect(url)
    try:
        return await _scale_data.load_postgres(conn, "public", shape)
    finally:
        await conn.close()


def load(kind: str, url: str, admin: str, shape: Shape) -> Load:
    if kind == "sqlite":
        anyio.run(make_schema, url, backend="asyncio")
        return _scale_data.load_sqlite(url.removeprefix("sqlite:///"), shape)
    return anyio.run(load_postgres, admin, url, shape, backend="asyncio")


# --- report ---------------------------------------------------------------------------------------


def report_times(title: str, plan: list[Case]) -> str:
    lines = [f"\n### {title}: ms per call, median (min-max) over the rounds\n",
             "| case | returned | median (min-max) | p90 |", "|---|---|---:|---:|"]
    for case in plan:
        p90 = statistics.quantiles(case.times, n=10, method="inclusive")[8] if len(case.times) > 1 else case.times[0]
        lines.append(f"| {case.name} | {case.returned} | {formatted(spread(case.times), ',.2f')} | {p90:.2f} |")
    return "\n".join(lines)


def report_plans(title: str, plans: dict[str, list[Plan]]) -> str:
    lines = [f"\n### {title}: the plan of every statement\n"]
    flagged = 0
    for name, found in plans.items():
        lines.append(f"- **{name}**" + ("" if found else ": no statement (answered without SQL)"))
        for p in found:
            query = " ".join(p.query.split())
            lines.append(f"    - `{query[:220]}{'...' if len(query) > 220 else ''}`")
            lines += [f"        - {line.strip()}" for line in p.lines if line.strip()]
            if p.generic is not None and p.generic != p.lines:
                lines.append("        - generic plan:")
                lines += [f"            - {line.strip()}" for line in p.generic if line.strip()]
            for line in p.flagged + p.generic_flagged:
                flagged += 1
                lines.append(f"        - **FLAGGED: {line.strip()}**")
    lines.append(f"\n{flagged} statement plans flagged (a whole-table scan of a tether table).")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executions", type=int, default=1_000_000)
    parser.add_argument("--pending", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds (after one warm-up)")
    add_store_options(parser, DATABASE)
    args = parser.parse_args()
    kinds = chosen_stores(parser, args.stores)
    if args.rounds < 2 or args.pending < 2 * (args.rounds + 1) or args.executions < 10_000 * (args.rounds + 1):
        # Each round resumes one paused run and prunes 100 of the oldest 1%.
        parser.error("give --rounds >= 2, --pending of at least twice the rounds, and --executions of at least "
                     f"{10_000 * (args.rounds + 1):,} for {args.rounds} rounds")
    shape = Shape(executions=args.executions, pending=args.pending)
    shape.counts()  # refuses a shape with too few finished runs, before anything is made

    record_statements()
    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    print(f"python {sys.version.split()[0]}, backend {args.backend}, CPUs {affinity} of {os.cpu_count()}, "
          f"{args.executions:,} executions, {args.pending:,} pending, {args.rounds} rounds", flush=True)
    with tempfile.TemporaryDirectory(prefix="tether-bench-scale-") as tmp:
        for kind in kinds:
            url = f"sqlite:///{Path(tmp) / 'scale.db'}" if kind == "sqlite" else database_url(args.postgres, DATABASE)
            try:
                loaded = load(kind, url, args.postgres, shape)
                version = (f"SQLite {sqlite3.sqlite_version}" if kind == "sqlite"
                           else f"PostgreSQL {anyio.run(server_version, url, backend='asyncio')}")
                print(f"\n## {kind} ({version})\n\n{loaded.report()}", flush=True)
                plan = anyio.run(measure, url, loaded.sample, args.rounds, backend=args.backend)
                print(report_times(f"{kind}, {args.backend}", plan), flush=True)
                plans = (sqlite_plans(url.removeprefix("sqlite:///"), plan) if kind == "sqlite"
                         else anyio.run(postgres_plans, url, plan, backend="asyncio"))
                print(report_plans(kind, plans), flush=True)
            finally:
                if kind == "postgres":
                    anyio.run(admin_execute, args.postgres, f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)',
                              backend="asyncio")


async def server_version(url: str) -> str:
    conn = await asyncpg.connect(url)
    try:
        return str(await conn.fetchval("SHOW server_version"))
    finally:
        await conn.close()


if __name__ == "__main__":
    main()
