"""Following an execution: what a stream costs the run, and how soon each event arrives.

    .venv/bin/python -m bench.streaming [--rounds 5] [--nodes 200] [--postgres DSN] [--no-trio]

A 200-node line of trivial async nodes (as `bench.chain`), on SQLite (a temp
file, WAL, synchronous FULL and NORMAL) and on Postgres (a database of its own,
created and dropped by the run):

1. cost: per-node time of `chain.run` with no follower, of `chain.stream` with a
   consumer that reads every event, and of `chain.stream` with a consumer that
   never iterates (its block's end waits for the run). The variants are
   interleaved round by round, in shuffled order, under asyncio and trio; the
   figures are medians per node: the whole call or block, and until the last
   node returned (the run's own pace; the rest is the consumer catching up),
   with the store object's reads (`read_journal`, `get_execution`,
   `list_pending`) per node beside them.
2. in-process latency: for each node of the streamed runs that read, the time
   from the node's return (its boundary is journaled right after) to the
   consumer receiving its `node_finished` event, `time.perf_counter` on both
   sides. p50/p95/max.
3. latency to another process: a child process follows the execution with
   `tether.runtime.events` on its own store object (Postgres LISTEN/NOTIFY, or
   SQLite's `data_version` check every `watch_interval`), and, second, an SSE
   client (httpx-sse) follows it through `tether serve`; the parent runs the
   chain. `time.time` stamps of the node's return (parent) and the event's
   arrival (child) on the same machine. The first node waits until the child
   has its first event, so the child's start-up is not measured, and the
   server follows one short run before the measured ones. p50/p95/max over
   every node but the first of every round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self
from urllib.parse import urlsplit, urlunsplit

import anyio
import asyncpg
import httpx
from tether.actors import Chain
from tether.stores import PostgresStore, SQLiteStore, open_store

if TYPE_CHECKING:
    from tether.runtime import RunResult

PREFIX = "sbench"
NOTE = "x" * 40
VARIANTS = ("run, no follower", "stream, reads every event", "stream, never reads")
ROOT = Path(__file__).resolve().parent.parent
TETHER = Path(sys.executable).with_name("tether")


def stamped_nodes(count: int, stamps: dict[str, float], clock: Callable[[], float],
                  gate: Callable[[], Any] | None = None) -> list[Any]:
    """The line's nodes; each records ``clock()`` by its name just before it returns."""

    def make(k: int) -> Any:
        name = f"n{k}"

        async def node(state: dict[str, Any]) -> dict[str, Any]:
            if k == 0 and gate is not None:
                await gate()
            update = {"step": state.get("step", 0) + 1, "note": NOTE}
            stamps[name] = clock()
            return update

        node.__name__ = name
        return node

    return [make(k) for k in range(count)]


def count_reads(store: Any) -> dict[str, int]:
    """Count the store object's reads of the journal and of the execution row (wraps the instance)."""
    counts: dict[str, int] = defaultdict(int)
    for name in ("read_journal", "get_execution", "list_pending"):
        original = getattr(store, name)

        async def counted(*args: Any, _original: Any = original, _name: str = name, **kwargs: Any) -> Any:
            counts[_name] += 1
            return await _original(*args, **kwargs)

        setattr(store, name, counted)
    return counts


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# -- 1 and 2: in process ---------------------------------------------------------


async def in_process(make_store: Callable[[], Any], count: int, variant: str) -> dict[str, Any]:
    stamps: dict[str, float] = {}
    arrivals: dict[str, float] = {}
    async with make_store() as store:
        chain = Chain("line", stamped_nodes(count, stamps, time.perf_counter), store=store)
        reads = count_reads(store)
        execution_id = f"{PREFIX}-{uuid.uuid4().hex[:12]}"
        result: RunResult | None
        start = time.perf_counter()
        if variant == VARIANTS[0]:
            result = await chain.run({}, execution_id=execution_id)
        elif variant == VARIANTS[1]:
            async with chain.stream({}, execution_id=execution_id) as stream:
                async for event in stream:
                    if event.type == "node_finished":
                        arrivals[event.node] = time.perf_counter()
            result = stream.result
        else:
            async with chain.stream({}, execution_id=execution_id) as stream:
                pass
            result = stream.result
        elapsed = time.perf_counter() - start
        ran = stamps[f"n{count - 1}"] - start  # until the last node returned: the run's own pace
    assert result is not None, "the stream returned no result"
    assert result.status == "completed", result
    if variant == VARIANTS[1]:
        missing = set(stamps) - set(arrivals)
        assert not missing, f"the consumer missed {len(missing)} node_finished events"
    latencies = [(arrivals[name] - stamps[name]) * 1e6 for name in arrivals]
    return {"us": elapsed / count * 1e6, "ran": ran / count * 1e6, "reads": sum(reads.values()) / count, "latency": latencies}


# -- 3: another process ------------------------------------------------------------


def follower_main() -> None:
    """The child: follow one execution, say "ready" at its first event, print the arrivals as JSON."""
    kind, target, execution_id = sys.argv[1:4]
    final = {"execution_completed", "execution_failed", "execution_cancelled"}

    async def by_events() -> dict[str, Any]:
        from tether.runtime import events

        arrivals: dict[str, float] = {}
        async with open_store(target) as store:
            reads = count_reads(store)
            async with events(store, execution_id) as stream:
                said = False
                async for event in stream:
                    if event.type == "node_finished":
                        arrivals[event.node] = time.time()
                    if not said:
                        print("ready", flush=True)
                        said = True
        return {"arrivals": arrivals, "reads": dict(reads)}

    async def by_sse() -> dict[str, Any]:
        from httpx_sse import aconnect_sse

        arrivals: dict[str, float] = {}
        url = f"{target}/api/executions/{execution_id}/events"
        async with httpx.AsyncClient(timeout=httpx.Timeout(60.0)) as client, \
                aconnect_sse(client, "GET", url) as source:
            source.response.raise_for_status()
            said = False
            async for sse in source.aiter_sse():
                if sse.event == "node_finished":
                    arrivals[json.loads(sse.data)["node"]] = time.time()
                if not said:
                    print("ready", flush=True)
                    said = True
                if sse.event in final:
                    break
        return {"arrivals": arrivals}

    out = asyncio.run(by_events() if kind == "events" else by_sse())
    print(json.dumps(out), flush=True)


async def followed_by_child(store: Any, count: int, kind: str, target: str) -> dict[str, Any]:
    """Run the line here while a child process follows it; the first node waits for the child."""
    stamps: dict[str, float] = {}
    ready = anyio.Event()

    async def gate() -> None:
        with anyio.fail_after(60):
            await ready.wait()

    chain = Chain("line", stamped_nodes(count, stamps, time.time, gate), store=store)
    execution_id = f"{PREFIX}-{uuid.uuid4().hex[:12]}"
    lines: list[str] = []
    async with anyio.create_task_group() as tg:
        done: dict[str, Any] = {}

        async def run() -> None:
            done["result"] = await chain.run({}, execution_id=execution_id)

        tg.start_soon(run)
        while await store.get_execution(execution_id) is None:  # the child follows an existing execution
            await anyio.sleep(0.001)
        command = [sys.executable, "-c", "from bench.streaming import follower_main; follower_main()",
                   kind, target, execution_id]
        async with await anyio.open_process(command, cwd=ROOT, stdout=subprocess.PIPE) as child:
            assert child.stdout is not None
            buffered = b""
            with anyio.fail_after(120):
                async for chunk in child.stdout:
                    buffered += chunk
                    *complete, buffered = buffered.split(b"\n")
                    for line in complete:
                        if line == b"ready":
                            ready.set()
                        elif line:
                            lines.append(line.decode())
                await child.wait()
            assert child.returncode == 0, f"follower exited with {child.returncode}"
    assert done["result"].status == "completed", done["result"]
    out = json.loads(lines[-1])
    arrivals = out["arrivals"]
    measured = [name for name in stamps if name != "n0"]
    missing = [name for name in measured if name not in arrivals]
    return {"latency": [(arrivals[name] - stamps[name]) * 1e3 for name in measured if name in arrivals],
            "missing": len(missing),
            "reads": sum(out.get("reads", {}).values()) / count if "reads" in out else None}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """`tether serve` on a store, in a process of its own, for as long as the block lasts."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Self:
        self.proc = subprocess.Popen([str(TETHER), "--store", self.url, "serve", "--port", str(self.port)],
                                     cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for _ in range(150):  # up to about 15 s
            if self.proc.poll() is not None:
                raise RuntimeError(f"tether serve exited: {self.proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
            try:
                if httpx.get(f"{self.base}/healthz", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.__exit__()
        raise RuntimeError("tether serve did not answer /healthz within 15 s")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# -- the run -----------------------------------------------------------------------


def with_database(dsn: str, database: str) -> str:
    return urlunsplit(urlsplit(dsn)._replace(path=f"/{database}"))


async def admin(dsn: str, statement: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


def measure(rounds: int, count: int, dsn: str | None, backends: tuple[str, ...]) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="tether-streaming-bench-"))
    cost: dict[str, dict[str, dict[str, list[float]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    reads: dict[str, dict[str, dict[str, list[float]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    pace: dict[str, dict[str, dict[str, list[float]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    near: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    far: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    far_reads: dict[str, list[float]] = defaultdict(list)
    missed: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))

    database = f"tether_bench_stream_{uuid.uuid4().hex[:8]}"
    pg = with_database(dsn, database) if dsn else None
    if dsn:
        asyncio.run(admin(dsn, f'CREATE DATABASE "{database}"'))
    try:
        def sqlite(synchronous: Literal["FULL", "NORMAL"]) -> Callable[[], Any]:
            return lambda: SQLiteStore(tmp / f"{uuid.uuid4().hex[:8]}.db", synchronous=synchronous)

        stores: dict[str, Callable[[], Any]] = {"SQLite FULL": sqlite("FULL"), "SQLite NORMAL": sqlite("NORMAL")}
        if pg:
            stores["Postgres"] = lambda: PostgresStore(pg)
        # Part 3 follows through one store per config that a server can open too.
        urls = {f"SQLite {sync}": f"sqlite:///{tmp / f'followed-{sync}.db'}?synchronous={sync}"
                for sync in ("FULL", "NORMAL")}
        if pg:
            urls["Postgres"] = pg

        for r in range(rounds):
            for config, make in stores.items():
                runs = [(variant, backend) for variant in VARIANTS for backend in backends]
                random.shuffle(runs)
                for variant, backend in runs:
                    out = anyio.run(in_process, make, count, variant, backend=backend)
                    cost[config][backend][variant].append(out["us"])
                    pace[config][backend][variant].append(out["ran"])
                    reads[config][backend][variant].append(out["reads"])
                    near[config][backend].extend(out["latency"])
            print(f"round {r + 1}/{rounds} (in process) done", flush=True)

        for config, url in urls.items():
            async def prepare(url: str = url) -> None:
                async with open_store(url):
                    pass  # the schema, before the server opens the store

            asyncio.run(prepare())
            with Server(url) as server:
                async def warm_up(url: str = url, base: str = server.base) -> None:
                    async with open_store(url) as store:  # the server's first follow pays its imports
                        await followed_by_child(store, 5, "sse", base)

                asyncio.run(warm_up())
                for _ in range(rounds):
                    order = [("events", url), ("SSE", server.base)]
                    random.shuffle(order)
                    for kind, target in order:
                        async def one(kind: str = kind, target: str = target, url: str = url) -> dict[str, Any]:
                            async with open_store(url) as store:
                                return await followed_by_child(store, count, "events" if kind == "events" else "sse",
                                                               target)

                        out = asyncio.run(one())
                        far[config][kind].extend(out["latency"])
                        missed[config][kind] += out["missing"]
                        if out["reads"] is not None:
                            far_reads[config].append(out["reads"])
            print(f"{config} (another process) done", flush=True)
    finally:
        if dsn:
            asyncio.run(admin(dsn, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
    return {"cost": cost, "pace": pace, "reads": reads, "near": near, "far": far, "far_reads": far_reads, "missed": missed}


def report(results: dict[str, Any], rounds: int, count: int, backends: tuple[str, ...]) -> str:
    cost, reads, near, far = results["cost"], results["reads"], results["near"], results["far"]
    lines = [f"\n### 1. Cost: us per node (median of {rounds} rounds), {count}-node line\n"]
    head = " | ".join(f"{b}, us | {b}, x run | {b}, last node at, us | {b}, reads/node" for b in backends)
    lines += [f"| store | variant | {head} |", "|---|---|" + "---|---|---|---|" * len(backends)]
    ratios = []
    for config, by_backend in cost.items():
        for i, variant in enumerate(VARIANTS):
            cells = []
            for backend in backends:
                us = statistics.median(by_backend[backend][variant])
                base = statistics.median(by_backend[backend][VARIANTS[0]])
                per = statistics.median(reads[config][backend][variant])
                ran = statistics.median(results["pace"][config][backend][variant])
                cells.append(f"{us:,.1f} | {us / base:.3f} | {ran:,.1f} | {per:.2f}")
            lines.append(f"| {config if i == 0 else ''} | {variant} | {' | '.join(cells)} |")
        for backend in backends:
            base = statistics.median(by_backend[backend][VARIANTS[0]])
            suffix = "" if backend == "asyncio" else f" ({backend})"
            ratios.append(f"ratio streaming {config}{suffix} stream/run = "
                          f"{statistics.median(by_backend[backend][VARIANTS[1]]) / base:.2f}")
            ratios.append(f"ratio streaming {config}{suffix} stream-unread/run = "
                          f"{statistics.median(by_backend[backend][VARIANTS[2]]) / base:.2f}")
    lines += ["", *ratios]

    lines += ["\n### 2. Node return to the consumer's node_finished, in process, us\n",
              "| store | backend | p50 | p95 | max | events |", "|---|---|---|---|---|---|"]
    for config, by_backend in near.items():
        for backend, samples in by_backend.items():
            lines.append(f"| {config} | {backend} | {percentile(samples, 0.5):,.0f} | "
                         f"{percentile(samples, 0.95):,.0f} | {max(samples):,.0f} | {len(samples)} |")

    lines += ["\n### 3. Node return to the event's arrival in another process (asyncio), ms\n",
              "| store | follower | p50 | p95 | max | events | missed | follower's reads/node |",
              "|---|---|---|---|---|---|---|---|"]
    for config, by_kind in far.items():
        for kind, samples in by_kind.items():
            per = (f"{statistics.median(results['far_reads'][config]):.2f}"
                   if kind == "events" and results["far_reads"].get(config) else "")
            label = "tether.runtime.events" if kind == "events" else "SSE via tether serve"
            lines.append(f"| {config} | {label} | {percentile(samples, 0.5):.2f} | {percentile(samples, 0.95):.2f} | "
                         f"{max(samples):.2f} | {len(samples)} | {results['missed'][config][kind]} | {per} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="admin DSN; the run creates a database of its own and drops it ('' to skip)")
    parser.add_argument("--no-trio", action="store_true", help="part 1 and 2 under asyncio only")
    args = parser.parse_args()
    backends = ("asyncio",) if args.no_trio else ("asyncio", "trio")
    results = measure(args.rounds, args.nodes, args.postgres or None, backends)
    print(report(results, args.rounds, args.nodes, backends))


if __name__ == "__main__":
    main()
