"""Human in the loop: how long a run takes to pause for a decision, and to finish once given one.

    .venv-bench/bin/python -m bench.hitl [--count 30] [--rounds 3] [--postgres DSN] [--quick]

The workload: a 3-node line validate -> approve -> charge, where approve asks a
person (an interrupt). Two latencies per execution, in milliseconds: pause (from
the call that starts the run until the caller knows it waits for a decision) and
resume (from the call that hands over the decision until the run has completed).

Peers, in the same run: tether `Chain` with `tether.runtime.interrupt`, resumed
with `chain.resume(id, Resume(approved=True))`, which claims the decision and
replays the run to its end (under asyncio, and trio as an extra row); LangGraph
`StateGraph` with `langgraph.types.interrupt` and `Command(resume=...)`, one
`AsyncSqliteSaver` / `AsyncPostgresSaver` (one connection), durability "sync";
DBOS 3.4, its documented pattern: the workflow publishes its status with
`DBOS.set_event` and waits in `DBOS.recv`; the caller sees the pause with
`DBOS.get_event` and resumes with `DBOS.send`, then awaits the workflow's result.
A DBOS workflow stays in memory while it waits; tether's and LangGraph's return.
On SQLite DBOS finds messages and events by polling, every 10 ms here (at its
default, 1 s, resume took about a second in shared/research/peers.md); on
Postgres it uses LISTEN/NOTIFY.

SQLite runs in WAL at synchronous FULL and NORMAL for every peer alike; Postgres
with the server's synchronous_commit (on), each tether and DBOS batch in a schema
of its own. The `--count` executions per peer and store run in `--rounds`
batches; each round runs every peer's batch in every store, in a shuffled order,
each batch in a fresh event loop with a fresh store and one untimed execution
first.

Each cell is the median of the rounds' medians, with the lowest and highest
round median beside it: the spread says whether the rounds agreed, which one
execution's stall (a GC pause, a poll missed) cannot move. A cell whose spread
exceeds its median is marked " !" and listed under "noisy cells:" at the end
(see `bench._spread`). `--quick` keeps 3 rounds, with fewer executions in each.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import random
import statistics
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench._savers import langgraph_saver
from bench._spread import Noisy, paired_ratios, spread_line
from bench.concurrency import dbos_config as concurrency_dbos_config

AMOUNT = 120
PEERS = ("tether (asyncio)", "tether (trio)", "LangGraph", "DBOS")
DBOS_SQLITE_POLL = 0.01
Latencies = list[tuple[float, float]]  # (pause ms, resume ms), one per execution


def ms_since(start: float) -> float:
    return (time.perf_counter() - start) * 1000


# --- tether ---------------------------------------------------------------------------------------


def tether_nodes() -> list[Callable[[dict[str, Any]], dict[str, Any]]]:
    from tether.runtime import interrupt

    def validate(state: dict[str, Any]) -> dict[str, Any]:
        return {"valid": state["amount"] > 0}

    def approve(state: dict[str, Any]) -> dict[str, Any]:
        decision = interrupt("approval", {"amount": state["amount"]})  # pauses the run the first time
        return {"approved": decision.approved}

    def charge(state: dict[str, Any]) -> dict[str, Any]:
        return {"charged": state["amount"] if state["approved"] else 0}

    return [validate, approve, charge]


async def run_tether(config: str, target: str, schema: str, count: int) -> Latencies:
    from tether.actors import Chain
    from tether.runtime import Resume
    from tether.stores import PostgresStore, SQLiteStore

    if config == "Postgres":
        store: Any = PostgresStore(target, schema=schema)
    else:
        store = SQLiteStore(target, synchronous=config.split()[1])
    async with store:
        chain = Chain("refund", tether_nodes(), store=store)

        async def one(execution_id: str) -> tuple[float, float]:
            start = time.perf_counter()
            paused = await chain.run({"amount": AMOUNT}, execution_id=execution_id)
            pause = ms_since(start)
            assert paused.status == "paused", paused
            start = time.perf_counter()
            done = await chain.resume(execution_id, Resume(approved=True))
            resume = ms_since(start)
            assert done.status == "completed", done
            assert done.output["charged"] == AMOUNT, done  # type: ignore[index,call-overload]
            return pause, resume

        await one("warm-up")
        return [await one(f"run-{i}") for i in range(count)]


# --- LangGraph ------------------------------------------------------------------------------------


def langgraph_graph() -> Any:
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    class State(TypedDict, total=False):
        amount: int
        valid: bool
        approved: bool
        charged: int

    def validate(state: State) -> State:
        return {"valid": state["amount"] > 0}

    def approve(state: State) -> State:
        decision = interrupt({"reason": "approval", "amount": state["amount"]})
        return {"approved": decision["approved"]}

    def charge(state: State) -> State:
        return {"charged": state["amount"] if state["approved"] else 0}

    graph = StateGraph(State)
    for node in (validate, approve, charge):
        graph.add_node(node.__name__, node)
    graph.add_edge(START, "validate")
    graph.add_edge("validate", "approve")
    graph.add_edge("approve", "charge")
    graph.add_edge("charge", END)
    return graph


async def run_langgraph(config: str, target: str, schema: str, count: int) -> Latencies:
    from langgraph.types import Command

    graph = langgraph_graph()
    batch = uuid.uuid4().hex[:8]  # thread ids unique across batches sharing the Postgres tables

    async def measure(saver: Any) -> Latencies:
        app = graph.compile(checkpointer=saver)

        async def one(thread: str) -> tuple[float, float]:
            cfg = {"configurable": {"thread_id": f"{batch}-{thread}"}}
            start = time.perf_counter()
            paused = await app.ainvoke({"amount": AMOUNT}, cfg, durability="sync")
            pause = ms_since(start)
            assert "__interrupt__" in paused, paused
            start = time.perf_counter()
            done = await app.ainvoke(Command(resume={"approved": True}), cfg, durability="sync")
            resume = ms_since(start)
            assert done["charged"] == AMOUNT, done
            return pause, resume

        await one("warm-up")
        return [await one(f"run-{i}") for i in range(count)]

    kind = "postgres" if config == "Postgres" else "sqlite"
    async with langgraph_saver(kind, target, config.split()[-1]) as saver:
        return await measure(saver)


# --- DBOS -----------------------------------------------------------------------------------------


@functools.cache
def dbos_workflow() -> Any:
    """The refund workflow, registered with DBOS once per process (its registry outlives `destroy`)."""
    from dbos import DBOS

    @DBOS.step()
    async def validate(amount: int) -> bool:
        return amount > 0

    @DBOS.step()
    async def charge(amount: int, approved: bool) -> int:
        return amount if approved else 0

    @DBOS.workflow()
    async def refund(amount: int) -> dict[str, Any]:
        valid = await validate(amount)
        await DBOS.set_event_async("status", "awaiting approval")  # what the caller waits for
        decision = await DBOS.recv_async("approval", timeout_seconds=60)
        approved = bool(decision and decision["approved"])
        return {"valid": valid, "approved": approved, "charged": await charge(amount, approved)}

    return refund


def dbos_config(config: str, target: str, schema: str) -> dict[str, Any]:
    """The concurrency benchmark's DBOS config; on SQLite, messages are found by polling, at our interval."""
    settings = concurrency_dbos_config(config, target, schema)
    if config != "Postgres":
        settings["notification_listener_polling_interval_sec"] = DBOS_SQLITE_POLL
    return settings


async def run_dbos(config: str, target: str, schema: str, count: int) -> Latencies:
    from dbos import DBOS

    refund = dbos_workflow()

    async def one() -> tuple[float, float]:
        start = time.perf_counter()
        handle = await DBOS.start_workflow_async(refund, AMOUNT)
        status = await DBOS.get_event_async(handle.workflow_id, "status", timeout_seconds=60)
        pause = ms_since(start)
        assert status == "awaiting approval", status
        start = time.perf_counter()
        await DBOS.send_async(handle.workflow_id, {"approved": True}, "approval")
        done = await handle.get_result()
        resume = ms_since(start)
        assert done["charged"] == AMOUNT, done
        return pause, resume

    DBOS(config=dbos_config(config, target, schema))  # type: ignore[arg-type]
    DBOS.launch()
    try:
        await one()
        return [await one() for _ in range(count)]
    finally:
        DBOS.destroy()


# --- measurement ----------------------------------------------------------------------------------


def run_batch(peer: str, config: str, target: str, schema: str, count: int) -> Latencies:
    """One peer's batch in a fresh event loop."""
    if peer.startswith("tether"):
        import anyio

        backend = "trio" if "trio" in peer else "asyncio"
        return anyio.run(run_tether, config, target, schema, count, backend=backend)
    job = {"LangGraph": run_langgraph, "DBOS": run_dbos}[peer]
    return asyncio.run(job(config, target, schema, count))


async def drop_schemas(dsn: str, schemas: list[str]) -> None:
    """Drop the schemas the tether and DBOS batches made (LangGraph's tables stay in public)."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        for schema in schemas:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


Results = dict[str, dict[str, list[Latencies]]]  # store -> peer -> one batch per round


def measure(count: int, rounds: int, dsn: str | None) -> Results:
    tmp = Path(tempfile.mkdtemp(prefix="tether-hitl-bench-"))
    results: Results = defaultdict(lambda: defaultdict(list))
    configs = ["SQLite FULL", "SQLite NORMAL"] + (["Postgres"] if dsn else [])
    schemas: list[str] = []
    try:
        for r in range(rounds):
            n = count // rounds + (r < count % rounds)  # every batch non-empty: each round has a median
            for config in configs:
                order = list(PEERS)
                random.shuffle(order)
                for peer in order:
                    target = dsn if config == "Postgres" else str(tmp / f"{uuid.uuid4().hex[:8]}.db")
                    schemas.append(f"b_{uuid.uuid4().hex[:8]}")
                    results[config][peer].append(run_batch(peer, config, target or "", schemas[-1], n))
            print(f"round {r + 1}/{rounds} done", flush=True)
    finally:
        if dsn:
            asyncio.run(drop_schemas(dsn, schemas))
    return results


def round_medians(batches: list[Latencies]) -> tuple[list[float], list[float]]:
    """Each round's median pause and median resume, in round order (so that peers pair by round)."""
    return ([statistics.median(p for p, _ in batch) for batch in batches],
            [statistics.median(r for _, r in batch) for batch in batches])


def report(results: Results, threads_after: list[str]) -> str:
    """One table per store: the median of the round medians (lowest-highest) per peer; then the ratios."""
    noisy = Noisy()
    lines = []
    for config, peers in results.items():
        rounds = {name: round_medians(batches) for name, batches in peers.items()}
        count = sum(len(batch) for batch in peers["tether (asyncio)"])
        base_pause, base_resume = rounds["tether (asyncio)"]
        tether_pause, tether_resume = statistics.median(base_pause), statistics.median(base_resume)
        lines += [f"\n### {config}, {count} executions per peer in {len(base_pause)} rounds\n",
                  ("| peer | pause ms: median (min-max) | x tether (asyncio) "
                   "| resume to done ms: median (min-max) | x tether (asyncio) |"),
                  "|---|---|---|---|---|"]
        for name in PEERS:
            pauses, resumes = rounds[name]
            lines.append(f"| {name} | {noisy.cell(f'{config}, {name}, pause ms', pauses, '.1f')} "
                         f"| {statistics.median(pauses) / tether_pause:.2f} "
                         f"| {noisy.cell(f'{config}, {name}, resume ms', resumes, '.1f')} "
                         f"| {statistics.median(resumes) / tether_resume:.2f} |")
        for name in ("LangGraph", "DBOS"):
            pauses, resumes = rounds[name]
            for what, mine, base, base_median in (("pause", pauses, base_pause, tether_pause),
                                                  ("resume", resumes, base_resume, tether_resume)):
                ratio = f"hitl-{what} {config} {name}/tether"
                lines.append(f"\nratio {ratio} = {statistics.median(mine) / base_median:.2f}")
                lines.append(spread_line(ratio, paired_ratios(mine, base)))
    # A thread a batch left running (DBOS's pollers) would have slowed the batches after it.
    lines.append(f"\nDBOS on SQLite polls every {DBOS_SQLITE_POLL * 1000:.0f} ms; "
                 f"threads alive after the last batch: {', '.join(threads_after)}.")
    lines.append("\n" + noisy.report())
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=30, help="executions per peer per store")
    parser.add_argument("--rounds", type=int, default=3, help="batches the executions are split into")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="admin DSN; tether and DBOS batches use a schema of their own ('' to skip)")
    parser.add_argument("--quick", action="store_true", help="fewer executions, 3 rounds (well under a minute)")
    args = parser.parse_args()
    if args.quick:
        args.count, args.rounds = 15, 3  # still 3 rounds: the spread needs them, and one bad batch is outvoted
    if args.count < args.rounds:
        parser.error("--count must be at least --rounds: every round's batch needs an execution")
    results = measure(args.count, args.rounds, args.postgres or None)
    print(report(results, [thread.name for thread in threading.enumerate()]))


if __name__ == "__main__":
    main()
