"""An agent loop with a scripted LLM: per-turn overhead, checkpointed at every turn.

    .venv-bench/bin/python -m bench.agent [--rounds 3] [--turns 40] [--postgres DSN]

The workload: N turns, each one LLM reply asking for one call of the trivial
tool `lookup(order) -> str`, then a final text answer; N+1 LLM calls and N tool
calls, reported as microseconds per turn (elapsed / N). The LLM is free and
instant, so what is left is each framework's own cost.

Peers in the same run, interleaved round by round (their order shuffled):
tether `Agent` + `ScriptedLLM`; fastaiagent 1.94 `Agent` + its test double
`FunctionModel`, with its SQLite/Postgres checkpointer; LangGraph
`create_react_agent` with a scripted fake chat model and `AsyncSqliteSaver` /
`AsyncPostgresSaver`, durability "sync". SQLite runs in WAL at synchronous FULL
and NORMAL for every peer alike; Postgres with the server's synchronous_commit,
each tether and fastaiagent run in a schema of its own, dropped at the end.
Every cell is the median over the rounds with their spread (lowest-highest)
beside it; a cell whose spread exceeds its median is marked " !" and listed
under "noisy cells:" at the end (see `bench._spread`).

Then the storage growth: bytes stored for a 40-turn run over bytes for a 10-turn
run (linear growth gives 4; a framework storing the whole conversation at every
checkpoint grows quadratically, towards 16).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sqlite3
import statistics
import tempfile
import time
import uuid
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import anyio
from tether.actors import Agent, FunctionTool, ScriptedLLM, ToolCall
from tether.stores import PostgresStore, SQLiteStore

from bench._savers import langgraph_saver
from bench._spread import Noisy, paired_ratios, spread_line
from bench.chain import MADE_SCHEMAS, new_schema
from bench.hitl import drop_schemas

PROMPT = "Look up the orders."


def lookup(order: str) -> str:
    """Look up an order."""  # LangGraph sends the docstring to the model as the tool's description
    return f"order {order}: shipped"


# --- tether ---------------------------------------------------------------------------------------


async def run_tether(store_factory: Callable[[], Any], turns: int) -> tuple[float, int]:
    """Microseconds per turn, and the journal's bytes (its payloads as JSON)."""
    llm = ScriptedLLM([ToolCall("lookup", {"order": f"A{k}"}) for k in range(turns)] + ["done"])
    async with store_factory() as store:
        agent = Agent(name="bench", llm=llm, tools=[FunctionTool(lookup)], store=store, max_turns=turns + 1)
        start = time.perf_counter()
        result = await agent.run(PROMPT, execution_id=uuid.uuid4().hex)
        elapsed = time.perf_counter() - start
        assert result.status == "completed", result
        entries = await store.read_journal(result.execution_id)
    return elapsed / turns * 1e6, sum(len(json.dumps(e.payload)) for e in entries)


# --- fastaiagent ----------------------------------------------------------------------------------


@contextmanager
def fastaiagent_synchronous(synchronous: str) -> Iterator[None]:
    """Set PRAGMA synchronous on the connections fastaiagent opens (it sets WAL itself)."""
    from fastaiagent._internal import storage

    real_connect = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = real_connect(*args, **kwargs)
        conn.execute(f"PRAGMA synchronous={synchronous}")  # the same setting as the others
        return conn

    storage.sqlite3.connect = connect  # type: ignore[attr-defined]
    try:
        yield
    finally:
        storage.sqlite3.connect = real_connect  # type: ignore[attr-defined]


def fastaiagent_responder(turns: int) -> Callable[[list[Any]], Any]:
    """A `FunctionModel` script: `turns` tool calls, then the answer."""
    count = 0

    def respond(messages: list[Any]) -> Any:
        nonlocal count
        count += 1
        if count <= turns:
            return "", [{"name": "lookup", "arguments": {"order": f"A{count - 1}"}}]
        return "done"

    return respond


async def run_fastaiagent(kind: str, target: str, synchronous: str, turns: int) -> float:
    from fastaiagent import Agent as FAgent, FunctionTool as FTool
    from fastaiagent.agent import AgentConfig
    from fastaiagent.testing import FunctionModel

    with fastaiagent_synchronous(synchronous) if kind == "sqlite" else nullcontext():
        if kind == "sqlite":
            from fastaiagent import SQLiteCheckpointer

            checkpointer: Any = SQLiteCheckpointer(target)
        else:
            from fastaiagent.checkpointers.postgres import PostgresCheckpointer

            checkpointer = PostgresCheckpointer(target, schema=new_schema("fa"))
        try:
            checkpointer.setup()
            agent = FAgent(
                name="bench",
                llm=FunctionModel(fastaiagent_responder(turns)),
                tools=[FTool(name="lookup", fn=lookup)],
                checkpointer=checkpointer,  # a row before every LLM call and every tool call
                config=AgentConfig(max_iterations=turns + 1),
            )
            start = time.perf_counter()
            # trace=False: its tracing writes spans to SQLite too, which the others do not do.
            result = await agent.arun(PROMPT, execution_id=uuid.uuid4().hex, trace=False)
            elapsed = time.perf_counter() - start
            assert result.status == "completed", result
            assert result.output == "done", result
            return elapsed / turns * 1e6
        finally:
            checkpointer.close()


# --- LangGraph ------------------------------------------------------------------------------------


def langgraph_app(turns: int, saver: Any) -> Any:
    """`create_react_agent` with a chat model replaying `turns` tool calls, then the answer."""
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage

    class Scripted(FakeMessagesListChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self  # the script already knows its tool calls

        async def _agenerate(self, messages: Any, stop: Any = None, run_manager: Any = None,
                             **kwargs: Any) -> Any:
            # The base class would run the sync _generate in a thread; the others do not pay that.
            return self._generate(messages, stop, None, **kwargs)

    replies = [AIMessage(content="", tool_calls=[{"name": "lookup", "args": {"order": f"A{k}"}, "id": f"call_{k}"}])
               for k in range(turns)]
    model = Scripted(responses=[*replies, AIMessage(content="done")])
    with warnings.catch_warnings():
        # Deprecated in favour of langchain.agents.create_agent, which is not installed; still LangGraph 1.2's.
        warnings.simplefilter("ignore")
        from langgraph.prebuilt import create_react_agent

        return create_react_agent(model, [lookup], checkpointer=saver)


async def run_langgraph(kind: str, target: str, synchronous: str, turns: int) -> float:
    async def timed(saver: Any) -> float:
        app = langgraph_app(turns, saver)
        # Two super-steps a turn (model, tools) and the final model call.
        config = {"configurable": {"thread_id": uuid.uuid4().hex}, "recursion_limit": 2 * turns + 10}
        start = time.perf_counter()
        out = await app.ainvoke({"messages": [("user", PROMPT)]}, config, durability="sync")
        elapsed = time.perf_counter() - start
        assert out["messages"][-1].content == "done", out
        assert len(out["messages"]) == 2 * turns + 2, out  # the prompt, N calls, N results, the answer
        return elapsed / turns * 1e6

    async with langgraph_saver(kind, target, synchronous) as saver:
        return await timed(saver)


# --- measurement ----------------------------------------------------------------------------------


def sqlite_bytes(path: Path, tables: tuple[str, ...]) -> int:
    """The byte length of every value in the rows of `tables` (the file holds one run)."""
    conn = sqlite3.connect(path)
    try:
        total = 0
        for table in tables:
            for row in conn.execute(f"SELECT * FROM {table}"):
                total += sum(len(v) if isinstance(v, bytes) else len(str(v).encode()) for v in row if v is not None)
        return total
    finally:
        conn.close()


PEERS = ("fastaiagent", "LangGraph", "tether (asyncio)", "tether (trio)")


def one_round(turns: int, dsn: str | None, fresh: Callable[[str], Path]) -> Iterator[tuple[str, str, float]]:
    """Every peer once in every configuration, in a shuffled order: (config, peer, us per turn)."""
    configs: list[tuple[str, str, Callable[[], str], str, Callable[[], Any]]] = [
        (f"SQLite {sync}", "sqlite", lambda: str(fresh("peer")), sync,
         lambda s=sync: SQLiteStore(fresh("t"), synchronous=s))
        for sync in ("FULL", "NORMAL")
    ]
    if dsn:
        configs.append(("Postgres", "postgres", lambda: dsn, "",
                        lambda: PostgresStore(dsn, schema=new_schema("tb"))))
    for config, kind, target, sync, store_factory in configs:
        runs: dict[str, Callable[[], float]] = {
            "fastaiagent": lambda k=kind, t=target, s=sync: asyncio.run(run_fastaiagent(k, t(), s, turns)),
            "LangGraph": lambda k=kind, t=target, s=sync: asyncio.run(run_langgraph(k, t(), s, turns)),
            "tether (asyncio)": lambda f=store_factory: anyio.run(run_tether, f, turns, backend="asyncio")[0],
            "tether (trio)": lambda f=store_factory: anyio.run(run_tether, f, turns, backend="trio")[0],
        }
        order = list(PEERS)
        random.shuffle(order)
        for name in order:
            yield config, name, runs[name]()


def measure(rounds: int, turns: int, dsn: str | None) -> dict[str, dict[str, list[float]]]:
    tmp = Path(tempfile.mkdtemp(prefix="tether-agent-bench-"))
    results: dict[str, dict[str, list[float]]] = defaultdict(dict)

    def fresh(name: str) -> Path:
        return tmp / f"{name}-{uuid.uuid4().hex[:8]}.db"

    # A short untimed round first: whoever ran first would otherwise pay the process's
    # first-use costs (lazy imports, pydantic schemas, connection pools' first connect).
    try:
        for _ in one_round(2, dsn, fresh):
            pass
        for r in range(rounds):
            for config, name, us in one_round(turns, dsn, fresh):
                results[config].setdefault(name, []).append(us)
            print(f"round {r + 1}/{rounds} done", flush=True)
    finally:
        if dsn and MADE_SCHEMAS:
            asyncio.run(drop_schemas(dsn, MADE_SCHEMAS))
    return results


def growth(turns: tuple[int, ...] = (10, 20, 40)) -> dict[str, list[int]]:
    """Bytes each framework stores for runs of each length in ``turns`` (SQLite NORMAL)."""
    tmp = Path(tempfile.mkdtemp(prefix="tether-agent-growth-"))

    def tether_bytes(turns: int) -> int:
        path = tmp / f"t-{turns}.db"
        return anyio.run(run_tether, lambda: SQLiteStore(path, synchronous="NORMAL"), turns)[1]

    def fastaiagent_bytes(turns: int) -> int:
        path = tmp / f"fa-{turns}.db"
        asyncio.run(run_fastaiagent("sqlite", str(path), "NORMAL", turns))
        return sqlite_bytes(path, ("checkpoints",))

    def langgraph_bytes(turns: int) -> int:
        path = tmp / f"lg-{turns}.db"
        asyncio.run(run_langgraph("sqlite", str(path), "NORMAL", turns))
        return sqlite_bytes(path, ("checkpoints", "writes"))

    return {
        "tether (journal payloads as JSON)": [tether_bytes(n) for n in turns],
        "fastaiagent (table checkpoints)": [fastaiagent_bytes(n) for n in turns],
        "LangGraph (tables checkpoints + writes)": [langgraph_bytes(n) for n in turns],
    }


def report(results: dict[str, dict[str, list[float]]], turns: int, sizes: dict[str, list[int]]) -> str:
    """One table per store (median over the rounds, with its spread), the ratios, then the stored bytes."""
    noisy = Noisy()
    lines = []
    for config, peers in results.items():
        tether = statistics.median(peers["tether (asyncio)"])
        lines += [f"\n### {config}, {turns} turns\n",
                  "| peer | us per turn: median (min-max) | x tether (asyncio) |", "|---|---|---|"]
        for name in PEERS:
            samples = peers[name]
            cell = noisy.cell(f"{config}, {name}, us per turn", samples)
            lines.append(f"| {name} | {cell} | {statistics.median(samples) / tether:.2f} |")
        for name in ("fastaiagent", "LangGraph"):
            if name in peers:
                ratio = f"agent-{turns} {config} {name}/tether"
                lines.append(f"\nratio {ratio} = {statistics.median(peers[name]) / tether:.2f}")
                lines.append(spread_line(ratio, paired_ratios(peers[name], peers["tether (asyncio)"])))
    lines += ["\n### Stored bytes after 10, 20 and 40 turns (SQLite)\n",
              "| peer | 10 turns | 20 turns | 40 turns | 40/10 |", "|---|---|---|---|---|"]
    for name, (ten, twenty, forty) in sizes.items():
        lines.append(f"| {name} | {ten:,} | {twenty:,} | {forty:,} | {forty / ten:.1f} |")
    lines.append("\n" + noisy.report())
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="admin DSN; each run uses a schema of its own ('' to skip)")
    parser.add_argument("--json", help="also write the raw results to this file (for python -m bench's plots)")
    args = parser.parse_args()
    results = measure(args.rounds, args.turns, args.postgres or None)
    sizes = growth()
    print(report(results, args.turns, sizes))
    if args.json:
        Path(args.json).write_text(json.dumps({"per_turn": results, "bytes": sizes, "turns": [10, 20, 40]}))


if __name__ == "__main__":
    main()
