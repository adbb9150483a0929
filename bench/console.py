"""The operator console's executions page at 100,000 executions, on SQLite and Postgres.

    python -m bench.console [--executions 100000] [--stores sqlite,postgres] [--rounds 30]
                            [--backend asyncio|trio] [--postgres DSN]

A fresh store per kind (a SQLite file; a Postgres database ``tether_bench_console``,
dropped at the end) gets its schema from ``open_store(url, create=True)`` and then
N executions by bulk INSERT / COPY with the raw driver (see `bench._console_data`):
5 root paths, 3 versions, mostly completed, ~5% paused each with its pending call,
~10% in a thread, created over 30 days; then ANALYZE. The time that took is
reported. The load always runs under asyncio (asyncpg); the measured part runs
on ``--backend``.

The console is ``create_app(store, [], token=None)`` served in this process
(httpx.ASGITransport inside the app's lifespan), and each case is a GET as a
browser sends it: the executions page unfiltered and under each filter, the
page reached by following ``rel=next`` 50 times, the JSON API's first page, and
the approvals page of one subtree (which shows its oldest 200 pending calls and
reads each one's execution for its input). Per case, 3 warm-up requests, then ``--rounds``
timed ones, the cases interleaved round by round so drift on the machine hits
them alike. After each request the store call the page makes is timed alone
(``search_executions`` with limit 51, the page's 50 and one to know there is a
next page), so the difference is the page's own cost: routing, the row models,
the HTML. Every response must be 200, and each page must show the rows the store
returns (the first page: 50).
"""

from __future__ import annotations

import argparse
import html
import os
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from urllib.parse import urlencode

import anyio
import asyncpg
import httpx
from tether.runtime.ops import create_app
from tether.runtime.ops._console import APPROVALS_SHOWN
from tether.stores import Execution, ExecutionSearch, Store, open_store

from bench import _console_data
from bench._console_data import Data
from bench._options import add_store_options, chosen_stores

DATABASE = "tether_bench_console"
WARMUP = 3
PAGE = 50
DEEP = 50
NEXT = re.compile(r"<a rel=next href='([^']*)'>")


@dataclass
class Case:
    name: str
    url: str
    kind: str  # "page", "api", "deep" or "approvals"
    matches: int
    """How many rows of the generated data the filter selects (all of them for no filter)."""
    search: ExecutionSearch | None = None
    prefix: str | None = None


def day_start(us: int) -> datetime:
    moment = _console_data.moment(us)
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


def cases(data: Data) -> list[Case]:
    """The requests measured, with the filters that select what the data holds (an id prefix of ten runs...)."""
    rows = data.executions
    # The first id of the numbering without its last digit: the ten runs numbered ...0 to ...9.
    id_prefix = f"run-{0:0{data.id_width}d}"[:-1]
    thread = max(data.threads, key=lambda t: (data.threads[t], t))  # the busiest conversation
    since = day_start(data.now_us) - timedelta(days=10)
    until = since + timedelta(days=1)
    stamp = "%Y-%m-%dT%H:%M:%S"
    tree = "supervisor:planner/worker:auditor"

    def count(keep: Callable[[_console_data.Execution], bool]) -> int:
        return sum(1 for e in rows if keep(e))

    def page(name: str, query: dict[str, str], search: ExecutionSearch, matched: int) -> Case:
        return Case(name, "/executions" + (f"?{urlencode(query)}" if query else ""), "page", matched, search)

    since_us = int((since - _console_data.moment(0)) / timedelta(microseconds=1))
    until_us = since_us + 24 * 3600 * 1_000_000
    return [
        page("first page", {}, ExecutionSearch(), len(rows)),
        page("status=paused", {"status": "paused"}, ExecutionSearch(status="paused"),
             count(lambda e: e.status == "paused")),
        page("runner=supervisor:planner", {"runner": "supervisor:planner"},
             ExecutionSearch(root_path="supervisor:planner"), count(lambda e: e.root_path == "supervisor:planner")),
        page("runner=chain:refund&version=v2", {"runner": "chain:refund", "version": "v2"},
             ExecutionSearch(root_path="chain:refund", version="v2"),
             count(lambda e: e.root_path == "chain:refund" and e.version == "v2")),
        # A path inside a tree lists the executions rooted above it (supervisor:planner's).
        page(f"path={tree}", {"path": tree}, ExecutionSearch(path_prefix=tree),
             count(lambda e: e.root_path.startswith(tree) or tree.startswith(e.root_path + "/"))),
        page(f"id={id_prefix}", {"id": id_prefix}, ExecutionSearch(id_prefix=id_prefix),
             count(lambda e: e.id.startswith(id_prefix))),
        page(f"thread={thread}", {"thread": thread}, ExecutionSearch(thread=thread), data.threads[thread]),
        page(f"since..until (1 day, {since:%m-%d})", {"since": f"{since:{stamp}}", "until": f"{until:{stamp}}"},
             ExecutionSearch(since=since, until=until), count(lambda e: since_us <= e.created_us < until_us)),
        Case(f"page {DEEP + 1} (rel=next x{DEEP})", "/executions", "deep", len(rows), ExecutionSearch()),
        Case("/api/executions?limit=50", "/api/executions?limit=50", "api", len(rows), ExecutionSearch()),
        Case("/approvals?path_prefix=supervisor:planner/", "/approvals?path_prefix=supervisor%3Aplanner%2F",
             "approvals", sum(1 for p in data.pending if p.path.startswith("supervisor:planner/")),
             prefix="supervisor:planner/"),
    ]


# --- one store ------------------------------------------------------------------------------------


@dataclass
class Measured:
    case: Case
    rows: int
    """Rows the page shows."""
    request: list[float]
    store: list[float]


def shown(kind: str, response: httpx.Response) -> int:
    """Rows a response shows: table rows, JSON executions, or approval cards."""
    if kind == "api":
        return len(response.json()["executions"])
    if kind == "approvals":
        return response.text.count("<form class=decide ")
    return response.text.count("<tr data-testid=execution-row>")


def check(case: Case, response: httpx.Response, expected: list[str] | None) -> int:
    """The response is a 200 that shows what the store returns; the rows it shows."""
    assert response.status_code == 200, f"{case.name}: {response.status_code} {response.text[:500]}"
    rows = shown(case.kind, response)
    if expected is not None:
        assert rows == len(expected), f"{case.name}: {rows} rows shown, the store returns {len(expected)}"
        if case.kind == "api":
            assert [e["execution_id"] for e in response.json()["executions"]] == expected, case.name
        elif case.kind != "approvals":
            missing = [i for i in expected if f">{html.escape(i)}</a>" not in response.text]
            assert not missing, f"{case.name}: the page lacks {missing[:3]}"
    if case.name == "first page":
        assert rows == PAGE, f"the first page shows {rows} rows, not {PAGE}"
    return rows


async def deep_url(client: httpx.AsyncClient, store: Store) -> tuple[str, Execution]:
    """The page after following rel=next DEEP times from the first, and the store's cursor for it."""
    url = "/executions"
    for _ in range(DEEP):
        response = await client.get(url)
        assert response.status_code == 200, f"{url}: {response.status_code}"
        found = NEXT.search(response.text)
        assert found is not None, f"{url} has no rel=next link"
        url = html.unescape(found.group(1))
    before = None
    for _ in range(DEEP):
        before = (await store.search_executions(ExecutionSearch(), limit=PAGE + 1, before=before))[PAGE - 1]
    assert before is not None
    return url, before


async def measure_store(store: Store, data: Data, rounds: int) -> list[Measured]:
    app = create_app(store, [], token=None)
    plan = cases(data)
    async with store, app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://console.test") as client:
        calls = [await store_call(store, client, case) for case in plan]
        results = [Measured(case, 0, [], []) for case in plan]
        for r in range(WARMUP + rounds):
            for case, call, result in zip(plan, calls, results, strict=True):
                start = time.perf_counter()
                response = await client.get(case.url)
                took = time.perf_counter() - start
                start = time.perf_counter()
                ids = await call()
                store_took = time.perf_counter() - start
                result.rows = check(case, response, ids if case.kind == "approvals" else ids[:PAGE])
                if r >= WARMUP:
                    result.request.append(took * 1000)
                    result.store.append(store_took * 1000)
    return results


async def store_call(store: Store, client: httpx.AsyncClient, case: Case) -> Callable[[], Awaitable[list[str]]]:
    """The store's part of a case's request, alone: what the page asks the store for."""
    before: Execution | None = None
    if case.kind == "deep":
        case.url, before = await deep_url(client, store)
    if case.kind == "approvals":
        async def approvals() -> list[str]:
            # The page: the oldest pending calls it shows (and one to know more wait), then
            # each one's execution for its input.
            rows = (await store.list_pending(path_prefix=case.prefix, limit=APPROVALS_SHOWN + 1))[:APPROVALS_SHOWN]
            for execution_id in dict.fromkeys(row.execution_id for row in rows):
                await store.get_execution(execution_id)
            return [row.execution_id for row in rows]
        return approvals

    async def search() -> list[str]:
        return [e.execution_id for e in await store.search_executions(case.search, limit=PAGE + 1, before=before)]
    return search


# --- the stores' lifecycles -----------------------------------------------------------------------


def database_url(admin: str, name: str) -> str:
    base, _, query = admin.partition("?")
    return f"{base.rpartition('/')[0]}/{name}" + (f"?{query}" if query else "")


async def create_database(admin: str) -> None:
    conn = await asyncpg.connect(admin)
    try:
        # WITH (FORCE): a run killed half-way leaves its database, and maybe a connection to it.
        await conn.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{DATABASE}"')
    finally:
        await conn.close()


async def drop_database(admin: str) -> None:
    conn = await asyncpg.connect(admin)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
    finally:
        await conn.close()


async def make_schema(url: str) -> float:
    start = time.perf_counter()
    async with open_store(url, create=True):
        pass
    return time.perf_counter() - start


async def load_postgres(admin: str, url: str, data: Data) -> dict[str, float]:
    await create_database(admin)
    schema = await make_schema(url)
    return {"schema": schema, **await _console_data.load_postgres(url, data)}


def load(kind: str, url: str, admin: str, data: Data) -> dict[str, float]:
    """Schema, then rows, then ANALYZE, on asyncio whatever --backend is (asyncpg runs on asyncio only)."""
    if kind == "sqlite":
        schema = anyio.run(make_schema, url, backend="asyncio")
        return {"schema": schema, **_console_data.load_sqlite(url.removeprefix("sqlite:///"), data)}
    return anyio.run(load_postgres, admin, url, data, backend="asyncio")


async def server_version(kind: str, url: str) -> str:
    if kind == "sqlite":
        return f"SQLite {sqlite3.sqlite_version}"
    conn = await asyncpg.connect(url)
    try:
        return f"PostgreSQL {await conn.fetchval('SHOW server_version')}"
    finally:
        await conn.close()


# --- report ---------------------------------------------------------------------------------------


def pct(samples: list[float], q: int) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1]


def report(kind: str, backend: str, results: list[Measured]) -> str:
    lines = [f"\n### {kind}, {backend}: request (whole GET) and the store's part alone, ms\n",
             "| case | matches | rows | median | p95 | max | store median | store p95 | page's own (median) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for m in results:
        req, st = m.request, m.store
        lines.append(f"| {m.case.name} | {m.case.matches:,} | {m.rows} | {statistics.median(req):.2f} | "
                     f"{pct(req, 95):.2f} | {max(req):.2f} | {statistics.median(st):.2f} | {pct(st, 95):.2f} | "
                     f"{statistics.median(req) - statistics.median(st):.2f} |")
    approvals = [m for m in results if m.case.kind == "approvals"]
    if approvals:
        lines.append(f"\nThe approvals row's store part is list_pending (the oldest {APPROVALS_SHOWN}) and one get_execution per "
                     f"execution listed ({approvals[0].rows} here), as the page makes them.")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executions", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=30, help="timed requests per case (after 3 warm-up)")
    add_store_options(parser, DATABASE)
    args = parser.parse_args()
    kinds = chosen_stores(parser, args.stores)
    if args.executions < PAGE * (DEEP + 1) or args.rounds < 2:
        parser.error(f"give --executions >= {PAGE * (DEEP + 1)} (the deep page needs them) and --rounds >= 2")

    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    print(f"python {sys.version.split()[0]}, backend {args.backend}, CPUs {affinity} of {os.cpu_count()}, "
          f"{args.executions:,} executions, {args.rounds} rounds", flush=True)
    start = time.perf_counter()
    data = _console_data.generate(args.executions)
    built = time.perf_counter() - start
    generation = ["\n### generation, s\n", "| store | executions | pending | schema | insert | ANALYZE | total |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
    tables = []
    with tempfile.TemporaryDirectory(prefix="tether-bench-console-") as tmp:
        for kind in kinds:
            url = (f"sqlite:///{Path(tmp) / 'console.db'}" if kind == "sqlite"
                   else database_url(args.postgres, DATABASE))
            try:
                took = load(kind, url, args.postgres, data)
                generation.append(f"| {kind} | {len(data.executions):,} | {len(data.pending):,} | "
                                  f"{took['schema']:.2f} | {took['insert']:.2f} | {took['analyze']:.2f} | "
                                  f"{sum(took.values()):.2f} |")
                print(f"{kind}: loaded in {sum(took.values()):.1f} s "
                      f"({anyio.run(server_version, kind, url, backend='asyncio')})", flush=True)
                results = anyio.run(measure_store, open_store(url, create=False), data, args.rounds,
                                    backend=args.backend)
                tables.append(report(kind, args.backend, results))
                print(tables[-1], flush=True)
            finally:
                if kind == "postgres":
                    anyio.run(drop_database, args.postgres, backend="asyncio")
    generation.append(f"\nBuilding the {len(data.executions):,} rows in Python took {built:.2f} s (both stores "
                      f"load the same rows).")
    print("\n".join(generation))


if __name__ == "__main__":
    main()
