"""What limits one Postgres under tether, and how tether's tables spread past one.

    python -m bench.scaling [--postgres DSN] [--seconds 4] [--concurrency 1,10,100]

Four measurements on the Postgres at ``--postgres``, each in a schema of its own
(dropped after), on asyncio:

1. boundaries per second: C executions of a 20-node Chain in one process, each
   started again when it ends, for ``--seconds``; journal entries committed per
   second, and per writing transaction (transaction ids the server handed out),
   which group commit raises above one;
2. WAL per step: bytes of write-ahead log (``pg_current_wal_lsn``) per Chain node,
   right after a ``CHECKPOINT`` (each page's first change writes the whole page)
   and again warm; and per human-in-the-loop cycle (pause, decide, finish);
3. connections: the most client connections the database had while C executions
   ran in one process (sampled every 5 ms), and what a ``tether worker`` process
   holds, idle and while it runs 200 executions;
4. partitioned tables: the four tables keyed by execution id, hash-partitioned by
   it into 8 partitions (the layout native partitioning and a distributed
   Postgres such as Citus both need); a whole life through the store's API on
   them, then the plan of every statement it sent, with the partitions it reads.
   A statement that reads one partition of each table is one a distributed
   Postgres routes to the one node holding that execution.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import asyncpg
from tether.actors import Chain
from tether.runtime import Resume, interrupt
from tether.stores import NewEntry, NewExecution, NewInterrupt, open_store

from bench import scale
from bench.chain import tether_nodes

NODES = 20
PARTITIONS = 8
PER_EXECUTION = ("tether_executions", "tether_journal", "tether_pending", "tether_idempotency")


def approve(state: dict[str, Any]) -> dict[str, Any]:
    return {"approved": interrupt("approval", {"amount": 120}).approved}


def done(state: dict[str, Any]) -> dict[str, Any]:
    return {"done": True}


async def with_schema(dsn: str, body: Callable[[str, asyncpg.Connection, str], Awaitable[Any]]) -> Any:
    """Run ``body(url, admin connection, schema)`` on a fresh schema; drop it after."""
    schema = f"scaling_{uuid.uuid4().hex[:8]}"
    url = f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"
    conn = await asyncpg.connect(dsn)
    try:
        async with open_store(url, create=True):
            pass
        return await body(url, conn, schema)
    finally:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()


async def transactions(conn: asyncpg.Connection) -> int:
    """The server's next transaction id: every writing transaction takes one (this call too)."""
    return int(await conn.fetchval("SELECT pg_current_xact_id()::text::bigint"))


async def connections(conn: asyncpg.Connection) -> int:
    """Client connections to this database, this one aside."""
    return int(await conn.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"))


# --- 1 and 3: boundaries per second, and the connections they take ----------------------------------


async def throughput(dsn: str, concurrency: int, seconds: float) -> dict[str, float]:
    async def body(url: str, conn: asyncpg.Connection, schema: str) -> dict[str, float]:
        async with open_store(url) as store:
            chain = Chain("line", tether_nodes(NODES), store=store)
            await chain.run({}, execution_id="warm-up")
            peak = await connections(conn)
            runs = 0
            deadline = time.perf_counter() + seconds

            async def lane() -> None:
                nonlocal runs
                while time.perf_counter() < deadline:
                    await chain.run({}, execution_id=uuid.uuid4().hex)
                    runs += 1

            before_entries = await conn.fetchval(f'SELECT count(*) FROM "{schema}".tether_journal')
            before_commits = await transactions(conn)
            started = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for _ in range(concurrency):
                    tg.start_soon(lane)
                while time.perf_counter() < deadline:
                    peak = max(peak, await connections(conn))
                    await anyio.sleep(0.005)
            took = time.perf_counter() - started
            after_commits = await transactions(conn) - 1  # this call's own
            entries = await conn.fetchval(f'SELECT count(*) FROM "{schema}".tether_journal') - before_entries
            return {"entries/s": entries / took, "runs/s": runs / took, "entries": entries,
                    "commits": after_commits - before_commits, "peak connections": peak}

    result: dict[str, float] = await with_schema(dsn, body)
    return result


async def worker_connections(dsn: str) -> dict[str, int]:
    """Connections a `tether worker` process holds idle, and at its busiest on 200 executions."""
    from bench import fleet

    async def body(url: str, conn: asyncpg.Connection, schema: str) -> dict[str, int]:
        baseline = await connections(conn)
        proc = fleet.worker(url, concurrency=8)
        try:
            with anyio.fail_after(60):
                while await connections(conn) == baseline:  # the worker's first connection
                    await anyio.sleep(0.05)
            await anyio.sleep(2.0)  # settled: its listener and its polling, nothing to run
            idle = await connections(conn) - baseline
            ids = [f"w-{n}" for n in range(200)]
            async with open_store(url) as store:
                fleet.throughput.store = store
                for execution_id in ids:
                    await fleet.throughput.start({}, execution_id=execution_id, detach=True)
                mine = await connections(conn) - baseline - idle  # this process's own, while it starts them
                busiest = 0
                with anyio.fail_after(300):
                    while True:
                        busiest = max(busiest, await connections(conn) - baseline - idle - mine)
                        done_count = await conn.fetchval(
                            f"""SELECT count(*) FROM "{schema}".tether_executions WHERE status = 'completed'""")
                        if done_count == len(ids):
                            break
                        await anyio.sleep(0.005)
            return {"idle": idle, "busy": idle + busiest}
        finally:
            proc.terminate()
            proc.wait(timeout=60)

    result: dict[str, int] = await with_schema(dsn, body)
    return result


# --- 2: WAL per step -------------------------------------------------------------------------------


async def wal(dsn: str, steps: int) -> dict[str, float]:
    async def body(url: str, conn: asyncpg.Connection, schema: str) -> dict[str, float]:
        async def lsn() -> int:
            return int(await conn.fetchval("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')"))

        out: dict[str, float] = {}
        async with open_store(url) as store:
            chain = Chain("line", tether_nodes(steps), store=store)
            await chain.run({}, execution_id="warm-up")  # the statements prepared, the pool full
            for name in ("after a CHECKPOINT", "warm"):
                if name != "warm":
                    await conn.execute("CHECKPOINT")
                start = await lsn()
                await chain.run({}, execution_id=uuid.uuid4().hex)
                out[f"bytes per node, {name}"] = (await lsn() - start) / steps
            hitl = Chain("hitl", [approve, done], store=store)
            start, cycles = await lsn(), 50
            for n in range(cycles):
                paused = await hitl.run({}, execution_id=f"h-{n}")
                assert paused.status == "paused", paused
                finished = await hitl.resume(f"h-{n}", Resume(approved=True))
                assert finished.status == "completed", finished
            out["bytes per human-in-the-loop cycle, warm"] = (await lsn() - start) / cycles
        return out

    result: dict[str, float] = await with_schema(dsn, body)
    return result


# --- 4: the per-execution tables, partitioned -------------------------------------------------------


async def partition(conn: asyncpg.Connection, schema: str) -> None:
    """Turn the tables keyed by execution id into hash-partitioned ones, with their indexes and triggers."""
    await conn.execute(f'SET search_path = "{schema}"')
    for table in PER_EXECUTION:
        key = "id" if table == "tether_executions" else "execution_id"
        triggers = await conn.fetch(
            "SELECT pg_get_triggerdef(t.oid) AS sql FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2 "
            "AND NOT t.tgisinternal", schema, table)
        async with conn.transaction():
            await conn.execute(f"ALTER TABLE {table} RENAME TO {table}_plain")
            # LIKE ... INCLUDING ALL: the same columns, defaults, keys and indexes, each key holding
            # the execution id as a partitioned table's unique keys must.
            await conn.execute(f"CREATE TABLE {table} (LIKE {table}_plain INCLUDING ALL) PARTITION BY HASH ({key})")
            for n in range(PARTITIONS):
                await conn.execute(f"CREATE TABLE {table}_p{n} PARTITION OF {table} "
                                   f"FOR VALUES WITH (MODULUS {PARTITIONS}, REMAINDER {n})")
            await conn.execute(f"INSERT INTO {table} SELECT * FROM {table}_plain")
            await conn.execute(f"DROP TABLE {table}_plain")
            for trigger in triggers:
                await conn.execute(trigger["sql"])
    await conn.execute("RESET search_path")


async def a_life(url: str) -> list[tuple[str, list[tuple[str, tuple[Any, ...]]]]]:
    """Every store call of an execution's life, on a store at ``url``; the statements each sent."""
    calls: list[tuple[str, list[tuple[str, tuple[Any, ...]]]]] = []

    async def call(name: str, op: Awaitable[Any]) -> Any:
        scale._recording = []
        try:
            return await op
        finally:
            calls.append((name, scale._recording))
            scale._recording = None

    owner, path = "scaling:1:0", "supervisor:planner/worker:auditor/tool:approve_refund"
    async with open_store(url) as store:
        started = await call("start_execution", store.start_execution(
            NewExecution(execution_id="life-1", runner="Supervisor", root_path="supervisor:planner",
                         fingerprint="f", input={"order": 7}), owner=owner, lease_seconds=60))
        lease = started.lease
        assert lease is not None
        await call("append (a step)", store.append(lease, [NewEntry(path="supervisor:planner", label="step")]))
        await call("put_idempotent", store.put_idempotent(lease, "charge#1", {"charge": "ch_1"}))
        await call("suspend", store.suspend(lease, [NewEntry(path=path, label="suspended", kind="suspended")],
                                            NewInterrupt(path=path, reason="approval")))
        await call("release_lease (paused)", store.release_lease(lease, status="paused"))
        await call("list_pending(prefix)", store.list_pending(path_prefix="supervisor:planner/"))
        _, lease = await call("claim_and_lease", store.claim_and_lease(
            "life-1", {"approved": True}, owner=owner, lease_seconds=60, path=path))
        assert lease is not None
        await call("load_execution", store.load_execution("life-1"))
        await call("get_idempotent", store.get_idempotent("life-1", "charge#1"))
        await call("renew_lease", store.renew_lease(lease, lease_seconds=60))
        await call("release_lease (completed)", store.release_lease(lease, status="completed", result={"ok": True}))
        await call("take_work", store.take_work(owner=owner, lease_seconds=60, limit=8))
        await call("search_executions", store.search_executions(limit=51))
        await call("prune", store.prune(older_than=datetime.now(UTC) + timedelta(days=1), limit=100))
    return calls


def partitions_in(table: str, plan: str) -> set[str]:
    """The partitions of ``table`` a plan reads (an index of one is named after it, with more after the number)."""
    return set(re.findall(rf"{table}_p(\d+)\b", plan))


async def partitioned(dsn: str) -> list[tuple[str, str, dict[str, str]]]:
    """(store call, statement, partitions read per table) for a life on partitioned tables."""
    async def body(url: str, conn: asyncpg.Connection, schema: str) -> list[tuple[str, str, dict[str, str]]]:
        await partition(conn, schema)
        calls = await a_life(url)  # the store is the unchanged one: it finds its tables as they were
        explain = await asyncpg.connect(dsn, statement_cache_size=0, server_settings={"search_path": schema})
        rows: list[tuple[str, str, dict[str, str]]] = []
        try:
            for name, statements in calls:
                for query, args in scale.distinct(statements):
                    plan = "\n".join(r[0] for r in await explain.fetch("EXPLAIN (COSTS OFF) " + query, *args))
                    read = {table: f"{len(partitions_in(table, plan))}/{PARTITIONS}" for table in PER_EXECUTION}
                    for table in PER_EXECUTION:
                        if re.search(rf"INSERT INTO {table}\b", query):
                            read[table] = "1 (a row goes to its key's)"  # not in the plan: chosen per row
                    rows.append((name, " ".join(query.split())[:90],
                                 {t: n for t, n in read.items() if not n.startswith("0/")}))
        finally:
            await explain.close()
        return rows

    result: list[tuple[str, str, dict[str, str]]] = await with_schema(dsn, body)
    return result


# --- report ----------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--seconds", type=float, default=4.0, help="how long each throughput run lasts")
    parser.add_argument("--concurrency", default="1,10,100", help="comma-separated executions at once")
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",") if c.strip()]
    scale.record_statements()
    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    version = subprocess.run(["psql", args.postgres, "-Atc", "SHOW server_version"], capture_output=True,
                             text=True, check=False).stdout.strip() or "?"
    print(f"python {sys.version.split()[0]}, asyncio, CPUs {affinity} of {os.cpu_count()}, PostgreSQL {version}")

    print(f"\n### Boundaries per second, one process, {NODES}-node chains, {args.seconds:g} s each\n")
    print("| executions at once | journal entries / s | chains / s | entries per write transaction "
          "| most connections |\n|---:|---:|---:|---:|---:|")
    for level in levels:
        r = anyio.run(throughput, args.postgres, level, args.seconds, backend="asyncio")
        print(f"| {level} | {r['entries/s']:,.0f} | {r['runs/s']:,.1f} | {r['entries'] / max(1, r['commits']):.2f} "
              f"| {r['peak connections']:.0f} |", flush=True)

    print("\n### WAL per step\n\n| what | bytes |\n|---|---:|")
    for name, value in anyio.run(wal, args.postgres, 200, backend="asyncio").items():
        print(f"| {name} | {value:,.0f} |", flush=True)

    print("\n### Connections of a `tether worker` process (--concurrency 8)\n")
    held = anyio.run(worker_connections, args.postgres, backend="asyncio")
    print(f"idle: {held['idle']}, running 200 executions: at most {held['busy']}", flush=True)

    print(f"\n### Partitions read per statement, the per-execution tables in {PARTITIONS} hash partitions\n")
    print("| store call | statement | partitions read |\n|---|---|---|")
    for name, query, read in anyio.run(partitioned, args.postgres, backend="asyncio"):
        shown = ", ".join(f"{t.removeprefix('tether_')} {n}" for t, n in read.items()) or "none"
        print(f"| {name} | `{query}...` | {shown} |")


if __name__ == "__main__":
    main()
