"""Many executions at once in one process: durable steps/s, peak memory, event-loop lag.

    .venv-bench/bin/python -m bench.concurrency [--executions 100] [--steps 20] [--rounds 3]
        [--postgres DSN] [--quick]

The workload: `--executions` executions of a `--steps`-step line started at once in
one process and one event loop, every step a trivial update checkpointed before
the next one runs. Reported: durable steps per second (all steps over the wall
time), the process's peak RSS, and the lag of a 1 ms ticker running in the same
loop meanwhile (p50/p99 of its overshoot), which shows how long the peer's work
holds the loop.

Peers, interleaved round by round (their order shuffled):
tether `Chain`, the runs in one anyio task group over one shared store, under
asyncio (and trio as an extra row); LangGraph `StateGraph` with one
`AsyncSqliteSaver` / `AsyncPostgresSaver` (one connection), durability "sync",
the runs gathered with `asyncio.gather`; DBOS 3.4, an async workflow, the runs
gathered the same way. Every peer's step is a trivial async function, run on the
event loop (a sync one would run in a worker thread in tether and LangGraph). SQLite runs in WAL at synchronous
FULL and NORMAL for every peer alike; Postgres with the server's
synchronous_commit (on), each tether and DBOS run in a schema of its own.

Every measurement runs in a fresh child process (`--one PEER CONFIG`, printing
one JSON line), so peak RSS is the peer's own and no peer inherits another's
threads or caches. The child runs one untimed execution first (first-use costs:
lazy imports, connections, compiled queries), then the timed batch.

Every cell is the median over the rounds with their spread (lowest-highest) beside
it; a cell whose spread exceeds its median is marked " !" and listed under
"noisy cells:" at the end (see `bench._spread`). `--quick` keeps 3 rounds and
runs fewer executions: a median of two would be a mean, and one stall would move it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench._savers import langgraph_saver
from bench._spread import Noisy, paired_ratios, spread_line

ROOT = Path(__file__).resolve().parents[1]
NOTE = "x" * 40
PEERS = ("tether (asyncio)", "tether (trio)", "LangGraph", "DBOS")
CONFIGS = ("SQLite FULL", "SQLite NORMAL", "Postgres")


# --- what the child measures ----------------------------------------------------------------------


def proc_status_mib(field: str) -> float:
    """A memory field of /proc/self/status (VmRSS: now, VmHWM: the process's peak), in MiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


async def ticker(sleep: Callable[[float], Awaitable[Any]], lags: list[float]) -> None:
    """Sleep 1 ms again and again in the peer's own loop; record each overshoot (ms)."""
    while True:
        before = time.perf_counter()
        await sleep(0.001)
        lags.append((time.perf_counter() - before - 0.001) * 1000)


async def gathered(make: Callable[[int], Awaitable[Any]], executions: int) -> tuple[list[Any], float, list[float]]:
    """Run `make(i)` for every execution at once with `asyncio.gather`, the ticker beside them."""
    lags: list[float] = []
    tick = asyncio.create_task(ticker(asyncio.sleep, lags))
    start = time.perf_counter()
    outs = await asyncio.gather(*(make(i) for i in range(executions)))
    elapsed = time.perf_counter() - start
    tick.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await tick
    return outs, elapsed, lags


def summary(total_steps: int, elapsed: float, rss_before: float, lags: list[float]) -> dict[str, float]:
    lags.sort()
    return {
        "steps/s": total_steps / elapsed,
        "peak RSS MiB": proc_status_mib("VmHWM"),
        "RSS before MiB": rss_before,
        "lag p50 ms": statistics.median(lags) if lags else 0.0,
        "lag p99 ms": lags[int(len(lags) * 0.99)] if lags else 0.0,
    }


def check(state: Any, steps: int) -> None:
    assert isinstance(state, dict), state
    assert state.get("step") == steps, state


# --- tether ---------------------------------------------------------------------------------------


def tether_nodes(steps: int) -> list[Any]:
    def make(k: int) -> Any:
        async def node(state: dict[str, Any]) -> dict[str, Any]:
            return {"step": state.get("step", 0) + 1, "note": NOTE}

        node.__name__ = f"n{k}"  # node names must be unique
        return node

    return [make(k) for k in range(steps)]


async def run_tether(config: str, target: str, schema: str, executions: int, steps: int) -> dict[str, float]:
    import anyio
    from tether.actors import Chain
    from tether.stores import PostgresStore, SQLiteStore

    if config == "Postgres":
        store: Any = PostgresStore(target, schema=schema)
    else:
        store = SQLiteStore(target, synchronous=config.split()[1])
    async with store:
        chain = Chain("line", tether_nodes(steps), store=store)
        check((await chain.run({"step": 0}, execution_id="warm-up")).output, steps)
        rss_before = proc_status_mib("VmRSS")
        lags: list[float] = []

        async def one(i: int) -> None:
            result = await chain.run({"step": 0}, execution_id=f"run-{i}")
            assert result.status == "completed", result
            check(result.output, steps)

        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker, anyio.sleep, lags)
            start = time.perf_counter()
            async with anyio.create_task_group() as runs:
                for i in range(executions):
                    runs.start_soon(one, i)
            elapsed = time.perf_counter() - start
            tg.cancel_scope.cancel()
    return summary(executions * steps, elapsed, rss_before, lags)


# --- LangGraph ------------------------------------------------------------------------------------


async def run_langgraph(config: str, target: str, schema: str, executions: int, steps: int) -> dict[str, float]:
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    class State(TypedDict, total=False):
        step: int
        note: str

    async def node(state: State) -> dict[str, Any]:
        return {"step": state.get("step", 0) + 1, "note": NOTE}

    graph = StateGraph(State)
    for k in range(steps):
        graph.add_node(f"n{k}", node)
    graph.add_edge(START, "n0")
    for k in range(steps - 1):
        graph.add_edge(f"n{k}", f"n{k + 1}")
    graph.add_edge(f"n{steps - 1}", END)

    async def measure(saver: Any) -> dict[str, float]:
        app = graph.compile(checkpointer=saver)
        run = uuid.uuid4().hex[:8]  # thread ids unique across runs sharing the Postgres tables

        def invoke(thread: str) -> Awaitable[Any]:
            config = {"configurable": {"thread_id": f"{run}-{thread}"}, "recursion_limit": steps + 10}
            return app.ainvoke({"step": 0}, config, durability="sync")

        check(await invoke("warm-up"), steps)
        rss_before = proc_status_mib("VmRSS")
        outs, elapsed, lags = await gathered(lambda i: invoke(str(i)), executions)
        for out in outs:
            check(out, steps)
        return summary(executions * steps, elapsed, rss_before, lags)

    kind = "postgres" if config == "Postgres" else "sqlite"
    async with langgraph_saver(kind, target, config.split()[-1]) as saver:
        return await measure(saver)


# --- DBOS -----------------------------------------------------------------------------------------


def sqlite_creator(path: str, synchronous: str) -> Callable[[], sqlite3.Connection]:
    """Opens DBOS's SQLite connections (its engine's `creator`) in WAL at `synchronous`.

    DBOS sets only busy_timeout and foreign_keys on its connections (and still does on
    these), so its file would otherwise run in the rollback journal at FULL.
    """

    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(path, check_same_thread=False)  # its pool hands connections across threads
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={synchronous}")
        return conn

    return connect


def dbos_config(config: str, target: str, schema: str) -> dict[str, Any]:
    """DBOS 3.4's config: its system database is the only database it needs."""
    base = {"name": "bench", "log_level": "WARNING"}  # WARNING: the others log nothing per run either
    if config == "Postgres":
        return {**base, "system_database_url": target, "dbos_system_schema": schema}
    return {**base, "system_database_url": f"sqlite:///{target}",
            "db_engine_kwargs": {"creator": sqlite_creator(target, config.split()[1])}}


async def run_dbos(config: str, target: str, schema: str, executions: int, steps: int) -> dict[str, float]:
    from dbos import DBOS

    @DBOS.step()
    async def node(state: dict[str, Any]) -> dict[str, Any]:
        return {"step": state["step"] + 1, "note": NOTE}  # a small delta, as the others store

    @DBOS.workflow()
    async def line(steps: int) -> dict[str, Any]:
        state: dict[str, Any] = {"step": 0}
        for _ in range(steps):
            state.update(await node(state))
        return state

    DBOS(config=dbos_config(config, target, schema))  # type: ignore[arg-type]
    DBOS.launch()
    try:
        check(await line(steps), steps)
        rss_before = proc_status_mib("VmRSS")
        outs, elapsed, lags = await gathered(lambda _: line(steps), executions)
        for out in outs:
            check(out, steps)
        return summary(executions * steps, elapsed, rss_before, lags)
    finally:
        DBOS.destroy()


# --- one measurement, in a child process ----------------------------------------------------------


async def drop_schema(dsn: str, schema: str) -> None:
    """Drop a run's own schema once it is measured."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


def one(peer: str, config: str, target: str, executions: int, steps: int) -> dict[str, float]:
    # tether and DBOS get a schema of their own (LangGraph's saver has no such option).
    schema = f"b_{uuid.uuid4().hex[:8]}"
    try:
        if peer.startswith("tether"):
            import anyio

            backend = "trio" if "trio" in peer else "asyncio"
            return anyio.run(run_tether, config, target, schema, executions, steps, backend=backend)
        job = {"LangGraph": run_langgraph, "DBOS": run_dbos}[peer]
        return asyncio.run(job(config, target, schema, executions, steps))
    finally:
        if config == "Postgres" and peer != "LangGraph":
            asyncio.run(drop_schema(target, schema))  # asyncpg needs asyncio: a loop of its own


def spawn(peer: str, config: str, target: str, executions: int, steps: int) -> dict[str, float]:
    """`one` in a fresh interpreter; its last line of output is the JSON result."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.concurrency", "--one", peer, config, "--target", target,
         "--executions", str(executions), "--steps", str(steps)],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{peer} on {config} failed:\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- the parent: rounds, then the report ----------------------------------------------------------


Results = dict[str, dict[str, list[dict[str, float]]]]


def measure(rounds: int, executions: int, steps: int, dsn: str | None) -> Results:
    tmp = Path(tempfile.mkdtemp(prefix="tether-concurrency-bench-"))
    results: Results = defaultdict(lambda: defaultdict(list))
    configs = [c for c in CONFIGS if dsn or c != "Postgres"]
    for r in range(rounds):
        for config in configs:
            order = list(PEERS)
            random.shuffle(order)
            for peer in order:
                target = dsn if config == "Postgres" else str(tmp / f"{uuid.uuid4().hex[:8]}.db")
                results[config][peer].append(spawn(peer, config, target or "", executions, steps))
        print(f"round {r + 1}/{rounds} done", flush=True)
    return results


def per_step_us(sample: dict[str, float]) -> float:
    """Wall microseconds per durable step: a cost, so that peer/tether > 1 means tether is ahead."""
    return 1e6 / sample["steps/s"]


def row(noisy: Noisy, config: str, name: str, samples: list[dict[str, float]], tether_us: float) -> str:
    """One peer's table row: each figure's median (min-max) over the rounds, and its cost over tether's."""
    us = [per_step_us(s) for s in samples]

    def cell(what: str, values: list[float], fmt: str) -> str:
        return noisy.cell(f"{config}, {name}, {what}", values, fmt)

    cells = [
        cell("steps/s", [s["steps/s"] for s in samples], ",.0f"),
        cell("us/step", us, ",.0f"),
        f"{statistics.median(us) / tether_us:.2f}",
        cell("peak RSS", [s["peak RSS MiB"] for s in samples], ".0f"),
        cell("RSS growth", [s["peak RSS MiB"] - s["RSS before MiB"] for s in samples], ".1f"),
        cell("lag p50", [s["lag p50 ms"] for s in samples], ".2f"),
        cell("lag p99", [s["lag p99 ms"] for s in samples], ".2f"),
    ]
    return f"| {name} | {' | '.join(cells)} |"


def report(results: Results, executions: int, steps: int) -> str:
    """One table per store, every cell the median over the rounds with its spread; then the ratios."""
    workload = f"concurrency-{executions}x{steps}"
    noisy = Noisy()
    lines = []
    for config, peers in results.items():
        us = {name: [per_step_us(s) for s in samples] for name, samples in peers.items()}
        tether = statistics.median(us["tether (asyncio)"])
        lines += [f"\n### {config}, {executions} executions x {steps} steps at once\n",
                  ("| peer | durable steps/s | us/step | x tether (asyncio) | peak RSS MiB "
                   "| RSS growth MiB | loop lag p50 ms | loop lag p99 ms |"),
                  "|---|---|---|---|---|---|---|---|"]
        lines += [row(noisy, config, name, peers[name], tether) for name in PEERS if name in peers]
        for name in ("LangGraph", "DBOS"):
            if name in us:
                ratio = f"{workload} {config} {name}/tether"
                lines.append(f"\nratio {ratio} = {statistics.median(us[name]) / tether:.2f}")
                lines.append(spread_line(ratio, paired_ratios(us[name], us["tether (asyncio)"])))
    lines.append("\nratio = wall us per durable step, peer over tether (asyncio); RSS growth = peak RSS "
                 "minus RSS after the untimed warm-up execution; every cell: median (min-max) over the "
                 "rounds; spread = the ratio's range round by round.")
    lines.append("\n" + noisy.report())
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executions", type=int, default=100)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="admin DSN; tether and DBOS runs use a schema of their own ('' to skip)")
    parser.add_argument("--quick", action="store_true", help="fewer executions, still 3 rounds (about a minute)")
    # The child's side: one measurement, printed as JSON.
    parser.add_argument("--one", nargs=2, metavar=("PEER", "CONFIG"), help=argparse.SUPPRESS)
    parser.add_argument("--target", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(*args.one, args.target, args.executions, args.steps)))
        return
    if args.quick:
        args.rounds, args.executions = 3, 40  # three rounds at least: a median with a spread that means something
    results = measure(args.rounds, args.executions, args.steps, args.postgres or None)
    print(report(results, args.executions, args.steps))


if __name__ == "__main__":
    main()
