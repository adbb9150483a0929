"""What a durable step's statement costs on Postgres, part by part, against the INSERT+COMMIT floor.

    python -m bench.append_parts [--postgres DSN] [--statements 300] [--rounds 5]

One asyncpg connection sends each statement ``--statements`` times in a row,
autocommitted, and the cases take turns round by round. Printed: microseconds
per statement, the median of the rounds, with their range:

- the floor: an INSERT of the entry's bytes into a plain table;
- the append as tether sends it (`stores._postgres.appends.ALONE`): the
  execution's row bumped under the lease, and the entry inserted, in one
  statement;
- the bump alone (an UPDATE of the execution's row, fenced by the lease);
- the journal INSERT alone, with and without the journal's notify trigger.

The execution is a real one, made by a one-node `Chain` in a schema of its own,
dropped at the end.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable

import anyio
import asyncpg
from tether.actors import Chain
from tether.stores import PostgresStore
from tether.stores._postgres.appends import ALONE

PAYLOAD = '{"n": 1, "s": "' + "x" * 40 + '"}'
PATH, LABEL = "root:line/node:x", "node:x"


async def main(dsn: str, statements: int, rounds: int) -> None:
    schema = "bench_parts_" + uuid.uuid4().hex[:8]
    store = PostgresStore(dsn, schema=schema)
    async with store:

        async def node(state: dict[str, object]) -> dict[str, object]:
            return {}

        await Chain("line", [node], store=store).run({}, execution_id="e")
        conn = await asyncpg.connect(dsn, server_settings={"search_path": schema})
        try:
            await conn.execute("UPDATE tether_executions SET lease_epoch = 7, lease_owner = 'bench' WHERE id = 'e'")
            await conn.execute("CREATE TABLE floor (id bigserial PRIMARY KEY, b text)")
            seqs = itertools.count(10**6)

            async def floor() -> None:
                await conn.execute("INSERT INTO floor (b) VALUES ($1)", "x" * 119)

            async def append() -> None:
                await conn.fetch(ALONE, "e", 7, "bench", 1, [PATH], [LABEL], ["step"], [PAYLOAD])

            async def bump() -> None:
                await conn.execute("UPDATE tether_executions SET next_seq = next_seq + 1 "
                                   "WHERE id = 'e' AND lease_epoch = 7 AND lease_owner = 'bench'")

            async def insert() -> None:
                await conn.execute("INSERT INTO tether_journal (execution_id, seq, path, label, kind, payload, "
                                   "created_at) VALUES ('e', $1, $2, $3, 'step', $4::json, now())",
                                   next(seqs), PATH, LABEL, PAYLOAD)

            cases: dict[str, Callable[[], Awaitable[None]]] = {
                "floor: INSERT into a plain table": floor,
                "tether's append (bump + entry, one statement)": append,
                "the bump alone (UPDATE of the execution's row)": bump,
                "the journal INSERT alone": insert,
            }
            results: dict[str, list[float]] = {name: [] for name in cases}

            async def measure(name: str, case: Callable[[], Awaitable[None]]) -> None:
                start = time.perf_counter()
                for _ in range(statements):
                    await case()
                results.setdefault(name, []).append((time.perf_counter() - start) / statements * 1e6)

            for _ in range(rounds):
                for name, case in cases.items():
                    await measure(name, case)
            await conn.execute("ALTER TABLE tether_journal DISABLE TRIGGER tether_journal")
            for _ in range(rounds):
                await measure("the journal INSERT alone, trigger disabled", insert)
            hot = await conn.fetchrow("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
                                      "WHERE relname = 'tether_executions' AND schemaname = $1", schema)
        finally:
            await conn.close()
        await store.drop_schema()
    print("| statement | us: median (min-max) |\n|---|---|")
    for name, values in results.items():
        print(f"| {name} | {statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f}) |")
    if hot is not None:
        print(f"updates of the execution's row: {hot['n_tup_upd']}, of them HOT: {hot['n_tup_hot_upd']}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--statements", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    anyio.run(main, args.postgres, args.statements, args.rounds, backend="asyncio")
