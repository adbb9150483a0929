"""The actor kernel's own costs, on both anyio backends.

    python -m bench.kernel [--quick] [--postgres DSN]

- mailbox: messages per second through an in-memory mailbox (``ask`` round trips
  and one-way ``send``), no store;
- durable: messages per second to one durable actor, each one two journaled
  boundaries (accepted, handled), on SQLite FULL and NORMAL and on Postgres;
- 50 durable actors at once on SQLite NORMAL: messages per second, and the lag of a
  1 ms ticker meanwhile (p50/p99), which shows whether store work blocks the loop;
- memory per idle actor: RSS growth per actor with 100,000 actors spawned.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel
from tether.runtime import Actor, Runtime
from tether.stores import PostgresStore, SQLiteStore, Store


class Add(BaseModel):
    n: int = 1


class Total(BaseModel):
    total: int = 0


class Counter(Actor[Total]):
    kind = "counter"
    messages = (Add,)

    async def receive(self, message: Any) -> Any:
        self.state.total += message.n
        return self.state.total


def rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


async def mailbox(n: int) -> dict[str, float]:
    async with Runtime() as rt:
        ref = await rt.spawn(Counter, "c")
        start = time.perf_counter()
        for _ in range(n):
            await ref.ask(Add())
        asks = n / (time.perf_counter() - start)
        start = time.perf_counter()
        for _ in range(n):
            await ref.send(Add())
        await ref.ask(Add(n=0))
        sends = n / (time.perf_counter() - start)
    return {"ask round trips/s": asks, "sends/s": sends}


async def durable(store: Store, n: int) -> float:
    async with Runtime(store) as rt:
        ref = await rt.spawn(Counter, uuid.uuid4().hex[:8], durable=True)
        start = time.perf_counter()
        for _ in range(n):
            await ref.send(Add())
        await ref.ask(Add(n=0))
        return (n + 1) / (time.perf_counter() - start)


async def many_durable(store: Store, actors: int, each: int) -> dict[str, float]:
    lags: list[float] = []

    async def ticker() -> None:
        while True:
            before = time.perf_counter()
            await anyio.sleep(0.001)
            lags.append((time.perf_counter() - before - 0.001) * 1000)

    async with Runtime(store) as rt, anyio.create_task_group() as tg:
        refs = [await rt.spawn(Counter, f"m{i}", durable=True) for i in range(actors)]
        tg.start_soon(ticker)
        start = time.perf_counter()
        async with anyio.create_task_group() as senders:
            for ref in refs:
                async def feed(ref: Any = ref) -> None:
                    for _ in range(each):
                        await ref.send(Add())
                    await ref.ask(Add(n=0))
                senders.start_soon(feed)
        rate = actors * (each + 1) / (time.perf_counter() - start)
        tg.cancel_scope.cancel()
    lags.sort()
    return {"messages/s": rate, "lag p50 ms": statistics.median(lags),
            "lag p99 ms": lags[int(len(lags) * 0.99)]}


async def idle_memory(count: int) -> float:
    async with Runtime(mailbox_size=16) as rt:
        before = rss_bytes()
        for i in range(count):
            await rt.spawn(Counter, str(i))
        return (rss_bytes() - before) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    n = 2_000 if args.quick else 10_000
    durable_n = 300 if args.quick else 1_000
    tmp = Path(tempfile.mkdtemp(prefix="tether-kernel-"))
    rows: list[tuple[str, str, str]] = []
    for backend in ("asyncio", "trio"):
        for name, value in anyio.run(mailbox, n, backend=backend).items():
            rows.append(("mailbox", f"{name} ({backend})", f"{value:,.0f}"))
        stores: dict[str, Any] = {
            "SQLite FULL": lambda: SQLiteStore(tmp / f"{uuid.uuid4().hex}.db", synchronous="FULL"),
            "SQLite NORMAL": lambda: SQLiteStore(tmp / f"{uuid.uuid4().hex}.db", synchronous="NORMAL"),
        }
        if args.postgres:
            stores["Postgres"] = lambda: PostgresStore(args.postgres, schema=f"kb_{uuid.uuid4().hex[:8]}")
        for name, make in stores.items():
            async def one(make: Any = make) -> float:
                async with make() as store:
                    return await durable(store, durable_n)
            rate = anyio.run(one, backend=backend)
            rows.append(("durable, 1 actor", f"{name} messages/s ({backend})", f"{rate:,.0f}"))
            rows.append(("durable, 1 actor", f"{name} journaled boundaries/s ({backend})", f"{2 * rate:,.0f}"))

        async def fifty() -> dict[str, float]:
            async with SQLiteStore(tmp / f"{uuid.uuid4().hex}.db", synchronous="NORMAL") as store:
                return await many_durable(store, 50, 20 if args.quick else 60)
        for name, value in anyio.run(fifty, backend=backend).items():
            rows.append(("durable, 50 actors, SQLite NORMAL", f"{name} ({backend})", f"{value:,.2f}"))
        count = 20_000 if args.quick else 100_000
        per_actor = anyio.run(idle_memory, count, backend=backend)
        rows.append((f"idle actors ({count:,})", f"bytes per actor ({backend})", f"{per_actor:,.0f}"))
    print("| workload | measure | value |\n|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
