"""Store latency against the raw driver, on both anyio backends.

    python -m bench.store [--rounds 5] [--ops 300] [--postgres DSN]

For SQLite (synchronous FULL and NORMAL) and Postgres, each round measures the
store's append, suspend, claim and read under asyncio and under trio, and the
raw driver (aiosqlite or asyncpg on asyncio) doing one INSERT+COMMIT of the same
bytes. Rounds interleave the variants so machine drift hits all of them alike;
the table reports medians of per-round medians, and each ratio to the raw write.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

import aiosqlite
import anyio
import asyncpg
from tether.stores import NewEntry, NewExecution, NewInterrupt, PostgresStore, SQLiteStore, Store

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

PAYLOAD = {"messages": [{"role": "tool", "content": "x" * 160}], "turn": 3}
PAYLOAD_JSON = json.dumps(PAYLOAD)
Timings = dict[str, list[float]]


async def timed(n: int, op: Callable[[int], Awaitable[object]]) -> float:
    """Median microseconds of ``n`` sequential calls of ``op(i)``."""
    samples = []
    for i in range(n):
        start = time.perf_counter_ns()
        await op(i)
        samples.append((time.perf_counter_ns() - start) / 1000)
    return statistics.median(samples)


async def store_round(make: Callable[[], Store], n: int) -> dict[str, float]:
    async with make() as store:
        started = await store.start_execution(
            NewExecution(execution_id=uuid.uuid4().hex, runner="bench", root_path="agent:a"),
            owner="bench", lease_seconds=600,
        )
        lease = started.lease
        assert lease is not None
        entry = NewEntry(path="agent:a", label="turn:3", payload=PAYLOAD)
        out = {"append": await timed(n, lambda i: store.append(lease, [entry]))}

        def suspend(i: int) -> Awaitable[object]:
            path = f"agent:a/tool:t#{i}"
            return store.suspend(lease, [NewEntry(path=path, label="s", kind="suspended", payload=PAYLOAD)],
                                 NewInterrupt(path=path, reason="approval", context={"amount": i}))

        out["suspend"] = await timed(n, suspend)
        out["claim"] = await timed(
            n, lambda i: store.claim(lease.execution_id, {"approved": True}, path=f"agent:a/tool:t#{i}", owner="bench")
        )
        out["read"] = await timed(
            n, lambda i: store.read_journal(lease.execution_id, after_seq=i, limit=1)
        )
        return out


async def raw_sqlite_round(path: Path, synchronous: str, n: int) -> float:
    async with aiosqlite.connect(path, isolation_level=None) as db:
        await db.execute("PRAGMA journal_mode=WAL")
        await db.execute(f"PRAGMA synchronous={synchronous}")
        await db.execute("CREATE TABLE IF NOT EXISTS raw (id INTEGER PRIMARY KEY, payload TEXT)")

        async def write(i: int) -> None:
            await db.execute("BEGIN")
            await db.execute("INSERT INTO raw (payload) VALUES (?)", (PAYLOAD_JSON,))
            await db.execute("COMMIT")

        return await timed(n, write)


async def raw_postgres_round(dsn: str, n: int) -> float:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("CREATE TABLE IF NOT EXISTS bench_raw (id bigserial PRIMARY KEY, payload json)")
        return await timed(n, lambda i: conn.execute(
            "INSERT INTO bench_raw (payload) VALUES ($1::json)", PAYLOAD_JSON))
    finally:
        await conn.execute("DROP TABLE IF EXISTS bench_raw")
        await conn.close()


def run(rounds: int, n: int, dsn: str | None) -> dict[str, Timings]:
    tmp = Path(tempfile.mkdtemp(prefix="tether-bench-"))
    configs: dict[str, Callable[[], Store]] = {
        "sqlite FULL": lambda: SQLiteStore(tmp / f"{uuid.uuid4().hex}.db", synchronous="FULL"),
        "sqlite NORMAL": lambda: SQLiteStore(tmp / f"{uuid.uuid4().hex}.db", synchronous="NORMAL"),
    }
    if dsn:
        configs["postgres"] = lambda: PostgresStore(dsn, schema=f"bench_{uuid.uuid4().hex[:10]}")
    results: dict[str, Timings] = defaultdict(lambda: defaultdict(list))
    for r in range(rounds):
        for name, make in configs.items():
            backends = ["asyncio", "trio"] if r % 2 == 0 else ["trio", "asyncio"]
            for backend in backends:
                for op, us in anyio.run(store_round, make, n, backend=backend).items():
                    results[name][f"{op} ({backend})"].append(us)
            if name.startswith("sqlite"):
                raw = asyncio.run(raw_sqlite_round(tmp / "raw.db", name.split()[1], n))
            else:
                raw = asyncio.run(raw_postgres_round(dsn, n))  # type: ignore[arg-type]
            results[name]["raw INSERT+COMMIT (asyncio)"].append(raw)
        print(f"round {r + 1}/{rounds} done", flush=True)
    return results


def report(results: dict[str, Timings]) -> str:
    lines = []
    for name, timings in results.items():
        raw = statistics.median(timings["raw INSERT+COMMIT (asyncio)"])
        lines += [f"\n### {name}\n", "| operation | median us | x raw write |", "|---|---|---|"]
        for op, samples in timings.items():
            us = statistics.median(samples)
            lines.append(f"| {op} | {us:,.0f} | {us / raw:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ops", type=int, default=300, help="operations per op type per round")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="admin DSN; bench schemas are created there ('' to skip)")
    args = parser.parse_args()
    print(report(run(args.rounds, args.ops, args.postgres or None)))


if __name__ == "__main__":
    main()
