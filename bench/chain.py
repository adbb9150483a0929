"""A 200-node line, one trivial update per node, checkpointed after every node.

    .venv-bench/bin/python -m bench.chain [--rounds 9] [--nodes 200] [--postgres DSN]

Peers in the same run, interleaved round by round (their order shuffled):
tether `Chain`; fastaiagent 1.94 `Chain` with its SQLite/Postgres checkpointer;
LangGraph `StateGraph` with `AsyncSqliteSaver`/`AsyncPostgresSaver`, durability
"sync"; DBOS 3.4, a workflow of async steps on its SQLite or Postgres system
database. Beside them, the floor: the raw driver doing one INSERT+COMMIT of the
same bytes per node; for SQLite also the thread floor, the same transactions on
a worker thread awaited from the loop: the least a store that never blocks its
caller's loop can do (a commit that fsyncs must not run on the loop). SQLite
runs in WAL at synchronous FULL and NORMAL for every peer alike; Postgres with
the server's synchronous_commit (on).

The Postgres floor inserts into an ordinary table, in a schema of the run's own
(dropped afterwards): its commit waits for the WAL to reach the disk, as every
peer's checkpoint does. A temporary table writes no WAL, so its commit has
nothing to flush (measured here: 55-70 us per INSERT+COMMIT into a temporary
table, 230-320 us into an ordinary one). Dividing by it would make every peer
look several times further from the floor than it is. It stays in the
table as its own row, "round trip (temp table, no fsync)": the statement's
round trip alone, what is left of a commit once the fsync is taken away.

An untimed round of 20 nodes runs first, so that no timed round carries the
process's first-use costs. Every cell is the median over the rounds with their
spread (lowest-highest) beside it; a cell whose spread exceeds its median is
marked " !" and listed under "noisy cells:" at the end (see `bench._spread`).

Every peer's node is an async function, so every peer runs it on the event loop.
A sync node would not be the same work everywhere: tether and LangGraph run it in
a worker thread (it may block), fastaiagent calls it on the loop.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import queue
import random
import sqlite3
import statistics
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import anyio
import asyncpg
from tether.actors import Chain
from tether.stores import PostgresStore, SQLiteStore

from bench._savers import langgraph_saver
from bench._spread import Noisy, paired_ratios, spread, spread_line
from bench.hitl import drop_schemas

UPDATE = {"step": 1, "note": "x" * 40}
PAYLOAD = json.dumps(UPDATE)
FLOOR = "floor: raw INSERT+COMMIT"
THREAD_FLOOR = "thread floor: the same on a worker thread"
ROUND_TRIP = "round trip (temp table, no fsync)"  # Postgres only; not a floor, see the docstring
MADE_SCHEMAS: list[str] = []


def new_schema(prefix: str) -> str:
    """A Postgres schema name for one run, remembered so that `measure` drops it at the end."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    MADE_SCHEMAS.append(name)
    return name


def tether_nodes(count: int) -> list[Any]:
    def make(k: int) -> Any:
        async def node(state: dict[str, Any]) -> dict[str, Any]:
            return {"step": state.get("step", 0) + 1, "note": UPDATE["note"]}

        node.__name__ = f"n{k}"
        return node

    return [make(k) for k in range(count)]


async def run_tether(store_factory: Callable[[], Any], count: int) -> tuple[float, dict[str, float]]:
    async with store_factory() as store:
        chain = Chain("line", tether_nodes(count), store=store)
        start = time.perf_counter()
        result = await chain.run({}, execution_id=uuid.uuid4().hex)
        elapsed = time.perf_counter() - start
        assert result.status == "completed", result
        entries = [e for e in await store.read_journal(result.execution_id) if e.label.startswith("node:")]
        sizes = [len(json.dumps(e.payload)) for e in entries]
    per_node = {"first 20": statistics.mean(sizes[:20]), "last 20": statistics.mean(sizes[-20:])}
    return elapsed / count * 1e6, per_node


async def run_fastaiagent(kind: str, target: str, synchronous: str, count: int) -> float:
    from fastaiagent import Chain as FChain, FunctionTool

    from bench.agent import fastaiagent_synchronous

    with fastaiagent_synchronous(synchronous) if kind == "sqlite" else nullcontext():
        if kind == "sqlite":
            from fastaiagent import SQLiteCheckpointer

            checkpointer: Any = SQLiteCheckpointer(target)
        else:
            from fastaiagent.checkpointers.postgres import PostgresCheckpointer

            checkpointer = PostgresCheckpointer(target, schema=new_schema("fa"))
        checkpointer.setup()

        async def step(step: int = 0) -> dict[str, Any]:
            return {"step": step + 1, "note": UPDATE["note"]}

        chain = FChain("line", checkpointer=checkpointer)
        for k in range(count):
            chain.add_node(f"n{k}", tool=FunctionTool(name=f"n{k}", fn=step))
        for k in range(count - 1):
            chain.connect(f"n{k}", f"n{k + 1}")
        start = time.perf_counter()
        result = await chain.aexecute({"step": 0}, execution_id=uuid.uuid4().hex, trace=False)
        elapsed = time.perf_counter() - start
        assert result.status == "completed", result
        return elapsed / count * 1e6


async def run_langgraph(kind: str, target: str, synchronous: str, count: int) -> float:
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    class State(TypedDict, total=False):
        step: int
        note: str

    async def node(state: State) -> dict[str, Any]:
        return {"step": state.get("step", 0) + 1, "note": UPDATE["note"]}

    graph = StateGraph(State)
    for k in range(count):
        graph.add_node(f"n{k}", node)
    graph.add_edge(START, "n0")
    for k in range(count - 1):
        graph.add_edge(f"n{k}", f"n{k + 1}")
    graph.add_edge(f"n{count - 1}", END)
    config = {"configurable": {"thread_id": uuid.uuid4().hex}, "recursion_limit": count + 10}

    async def timed(saver: Any) -> float:
        app = graph.compile(checkpointer=saver)
        start = time.perf_counter()
        await app.ainvoke({"step": 0}, config, durability="sync")
        return (time.perf_counter() - start) / count * 1e6

    async with langgraph_saver(kind, target, synchronous) as saver:
        return await timed(saver)


@functools.cache
def dbos_line() -> Any:
    """The DBOS workflow, registered once per process (DBOS warns about a second registration)."""
    from dbos import DBOS

    @DBOS.step()
    async def node(state: dict[str, Any]) -> dict[str, Any]:
        return {"step": state["step"] + 1, "note": UPDATE["note"]}

    @DBOS.workflow()
    async def line(steps: int) -> dict[str, Any]:
        state: dict[str, Any] = {"step": 0}
        for _ in range(steps):
            state.update(await node(state))
        return state

    return line


async def run_dbos(kind: str, target: str, synchronous: str, count: int) -> float:
    """A DBOS 3.4 workflow of `count` async steps, each returning the same small update."""
    from dbos import DBOS

    from bench.concurrency import dbos_config

    line = dbos_line()
    config = "Postgres" if kind == "postgres" else f"SQLite {synchronous}"
    DBOS(config=dbos_config(config, target, new_schema("dbos")))  # type: ignore[arg-type]
    DBOS.launch()
    try:
        start = time.perf_counter()
        result = await line(count)
        elapsed = time.perf_counter() - start
        assert result["step"] == count, result
        return elapsed / count * 1e6
    finally:
        DBOS.destroy()


def sqlite_floor(path: Path, synchronous: str, count: int) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("CREATE TABLE IF NOT EXISTS floor (id INTEGER PRIMARY KEY, payload TEXT)")
    start = time.perf_counter()
    for _ in range(count):
        conn.execute("BEGIN")
        conn.execute("INSERT INTO floor (payload) VALUES (?)", (PAYLOAD,))
        conn.execute("COMMIT")
    conn.close()
    return (time.perf_counter() - start) / count * 1e6


async def sqlite_thread_floor(path: Path, synchronous: str, count: int) -> float:
    """`sqlite_floor`'s transactions on one worker thread, each awaited from the event loop."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("CREATE TABLE IF NOT EXISTS floor (id INTEGER PRIMARY KEY, payload TEXT)")
    loop = asyncio.get_running_loop()
    jobs: queue.SimpleQueue[asyncio.Future[None] | None] = queue.SimpleQueue()

    def commit_each() -> None:  # what aiosqlite's thread does: take a job, run it, wake the loop
        while (done := jobs.get()) is not None:
            conn.execute("BEGIN")
            conn.execute("INSERT INTO floor (payload) VALUES (?)", (PAYLOAD,))
            conn.execute("COMMIT")
            loop.call_soon_threadsafe(done.set_result, None)

    worker = threading.Thread(target=commit_each)
    worker.start()
    try:
        start = time.perf_counter()
        for _ in range(count):
            done = loop.create_future()
            jobs.put(done)
            await done
        return (time.perf_counter() - start) / count * 1e6
    finally:
        jobs.put(None)
        worker.join()
        conn.close()


async def postgres_floor(dsn: str, count: int, durable: bool = True) -> float:
    """Microseconds per INSERT of `PAYLOAD`, each committed at once (autocommit: one round trip).

    durable=True (the floor): into an ordinary table in a schema made for this call
    and dropped after it, so every commit flushes the WAL, as a checkpoint must.
    durable=False: into a temporary table, which writes no WAL, so the commit
    flushes nothing: the statement's round trip alone, for comparison only.
    """
    conn = await asyncpg.connect(dsn)
    schema = f"floor_{uuid.uuid4().hex[:8]}"
    table = f'"{schema}".floor' if durable else "floor"
    try:
        if durable:
            await conn.execute(f'CREATE SCHEMA "{schema}"')
            await conn.execute(f"CREATE TABLE {table} (id bigserial PRIMARY KEY, payload json)")
        else:
            await conn.execute("CREATE TEMP TABLE floor (id bigserial PRIMARY KEY, payload json)")
        insert = f"INSERT INTO {table} (payload) VALUES ($1::json)"
        start = time.perf_counter()
        for _ in range(count):
            await conn.execute(insert, PAYLOAD)
        return (time.perf_counter() - start) / count * 1e6
    finally:
        if durable:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()


Samples = dict[str, dict[str, list[float]]]  # store -> peer (or floor) -> us per node, one per round


def store_round(config: str, kind: str, target: Callable[[str], str], sync: str, count: int,
                store: Callable[[], Any], growth: dict[str, Any]) -> dict[str, float]:
    """Every peer once on one store: the three others in a shuffled order, then tether's two backends."""
    peers: list[tuple[str, Callable[[str, str, str, int], Awaitable[float]]]] = [
        ("fastaiagent", run_fastaiagent), ("LangGraph", run_langgraph), ("DBOS", run_dbos)]
    random.shuffle(peers)
    out = {name: asyncio.run(run(kind, target(name), sync, count)) for name, run in peers}
    for backend in ("asyncio", "trio"):
        out[f"tether ({backend})"], growth[config] = anyio.run(run_tether, store, count, backend=backend)
    return out


def one_round(count: int, dsn: str | None, fresh: Callable[[str], Path],
              growth: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Every peer and floor once in every store: store -> peer -> us per node."""
    out = {}
    for sync in ("FULL", "NORMAL"):
        config = f"SQLite {sync}"
        out[config] = store_round(config, "sqlite", lambda name: str(fresh(name)), sync, count,
                                  lambda s=sync: SQLiteStore(fresh("tether"), synchronous=s), growth)
        out[config][FLOOR] = sqlite_floor(fresh("floor"), sync, count)
        out[config][THREAD_FLOOR] = asyncio.run(sqlite_thread_floor(fresh("floor"), sync, count))
    if dsn:
        out["Postgres"] = store_round("Postgres", "postgres", lambda _: dsn, "", count,
                                      lambda: PostgresStore(dsn, schema=new_schema("tb")), growth)
        out["Postgres"][FLOOR] = asyncio.run(postgres_floor(dsn, count))
        out["Postgres"][ROUND_TRIP] = asyncio.run(postgres_floor(dsn, count, durable=False))
    return out


def measure(rounds: int, count: int, dsn: str | None) -> tuple[Samples, dict[str, Any]]:
    tmp = Path(tempfile.mkdtemp(prefix="tether-chain-bench-"))
    results: Samples = defaultdict(lambda: defaultdict(list))
    growth: dict[str, Any] = {}

    def fresh(name: str) -> Path:
        return tmp / f"{name}-{uuid.uuid4().hex[:8]}.db"

    try:
        # A short untimed round first: the first round would otherwise carry every first-use
        # cost (lazy imports, DBOS's first launch, the first connections), the same cost in
        # every run, and its spread would flag cells that one hiccup did not move.
        one_round(20, dsn, fresh, {})
        for r in range(rounds):
            for config, peers in one_round(count, dsn, fresh, growth).items():
                for name, us in peers.items():
                    results[config][name].append(us)
            print(f"round {r + 1}/{rounds} done", flush=True)
    finally:
        if dsn and MADE_SCHEMAS:  # the floor drops its own
            asyncio.run(drop_schemas(dsn, MADE_SCHEMAS))
    return results, growth


def report(results: Samples, growth: dict[str, Any], nodes: int = 200) -> str:
    """One table per store, each cell the median over the rounds with its spread; then the ratios."""
    noisy = Noisy()
    lines = []
    for config, peers in results.items():
        tether = statistics.median(peers["tether (asyncio)"])
        floor = statistics.median(peers[FLOOR])
        lines += [f"\n### {config}\n", "| peer | us per node: median (min-max) | x tether (asyncio) | x floor |",
                  "|---|---|---|---|"]
        for name, samples in peers.items():
            us = statistics.median(samples)
            cell = noisy.cell(f"{config}, {name}, us per node", samples)
            lines.append(f"| {name} | {cell} | {us / tether:.2f} | {us / floor:.2f} |")
        for name in ("fastaiagent", "LangGraph", "DBOS"):
            if name in peers:
                ratio = f"chain-{nodes} {config} {name}/tether"
                lines.append(f"\nratio {ratio} = {statistics.median(peers[name]) / tether:.2f}")
                lines.append(spread_line(ratio, paired_ratios(peers[name], peers["tether (asyncio)"])))
        if THREAD_FLOOR in peers:
            over = spread(paired_ratios(peers["tether (asyncio)"], peers[THREAD_FLOOR]))
            lines.append(f"\ntether (asyncio) / thread floor = {tether / statistics.median(peers[THREAD_FLOOR]):.2f} "
                         f"({over.low:.2f}-{over.high:.2f} over the rounds)")
        sizes = growth.get(config)
        if sizes:
            lines.append(f"\ntether journal bytes per node entry: first 20 nodes {sizes['first 20']:.0f}, "
                         f"last 20 nodes {sizes['last 20']:.0f}")
    lines.append("\n" + noisy.report())
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9, help="interleaved rounds; a 200-node tether run lasts under 10 ms at NORMAL, so take many")
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="admin DSN; each run uses a schema of its own ('' to skip)")
    parser.add_argument("--json", help="also write the raw results to this file (for python -m bench's plots)")
    args = parser.parse_args()
    results, growth = measure(args.rounds, args.nodes, args.postgres or None)
    print(report(results, growth, args.nodes))
    if args.json:
        Path(args.json).write_text(json.dumps({"per_node": results, "nodes": args.nodes}))


if __name__ == "__main__":
    main()
