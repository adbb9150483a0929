"""Event streams: the journal as typed events, resumable at any cursor, live tokens, from any process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from tether.actors import Agent, Chain, ScriptedLLM, ToolCall
from tether.runtime import Event, EventStream, Resume, TokenDelta, emit, events, interrupt
from tether.runtime._core.events import EVENTS, from_entry
from tether.stores import (
    ConfigurationError,
    ExecutionNotFound,
    JournalEntry,
    NewEntry,
    NewExecution,
    PostgresStore,
    SQLiteStore,
    Store,
)

from tests.testing.flows import INPUTS, build

if TYPE_CHECKING:
    from collections.abc import Sequence

# A chain with fan-out, an agent with parallel tools, a supervisor with two workers, a
# swarm that hands off, and a chain that pauses for a decision.
TOPOLOGIES = ["fanout", "agent", "supervisor", "swarm", "approval"]
PROPERTY = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


async def drain(stream: EventStream) -> list[Event]:
    return [event async for event in stream]


def journaled(seen: Sequence[Event]) -> list[tuple[int | None, str, str, str]]:
    return [(e.cursor, e.type, e.path, e.label) for e in seen if e.cursor is not None]


def as_events(journal: Sequence[JournalEntry]) -> list[tuple[int | None, str, str, str]]:
    return journaled([from_entry(entry) for entry in journal])


async def run_to_the_end(runner: Any, execution_id: str, flow: str) -> list[Event]:
    """Stream a run; a pause is decided while a follower keeps following. Every event seen."""
    async with runner.stream(INPUTS.get(flow, {}), execution_id=execution_id) as stream:
        seen = await drain(stream)
    assert stream.result is not None
    if stream.result.status == "paused":
        async with events(runner.store, execution_id, after=stream.cursor) as rest, anyio.create_task_group() as tg:
            tg.start_soon(runner.resume, execution_id, Resume(approved=True))
            seen += await drain(rest)
    return seen


@pytest.mark.parametrize("flow", TOPOLOGIES)
async def test_the_journal_events_of_a_stream_are_the_journal_in_order_once(store: Store, flow: str) -> None:
    runner = build(flow, store)
    seen = await run_to_the_end(runner, "e1", flow)
    journal = await store.read_journal("e1")
    assert journaled(seen) == as_events(journal)
    assert [e.cursor for e in seen if e.cursor is not None] == list(range(1, len(journal) + 1))
    types = {e.type for e in seen}
    assert {"execution_started", "execution_completed"} <= types
    expected = {"fanout": {"node_started", "node_finished"},
                "agent": {"llm_turn", "tool_call", "tool_result"},
                "supervisor": {"delegation", "reply", "message_accepted", "message_handled"},
                "swarm": {"handoff", "llm_turn"},
                "approval": {"interrupt", "execution_paused", "execution_resumed"}}[flow]
    assert expected <= types, types
    assert seen[-1].type == "execution_completed"


async def test_an_interrupt_event_carries_its_pending_row_and_the_pause_names_it(store: Store) -> None:
    chain = build("approval", store)
    async with chain.stream({}, execution_id="p") as stream:
        seen = await drain(stream)
    [asked] = [e for e in seen if e.type == "interrupt"]
    assert asked.type == "interrupt"  # for the type checker
    assert asked.pending is not None and asked.pending.agent_path == asked.call_path == "chain:approval/node:approve"
    paused = seen[-1]
    assert paused.type == "execution_paused" and paused.pending == ["chain:approval/node:approve"]
    assert stream.result is not None and stream.result.status == "paused"


@PROPERTY
@given(cuts=st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=12),
       first=st.floats(min_value=0, max_value=1))
@pytest.mark.parametrize("flow", ["fanout", "agent", "supervisor"])
async def test_reconnecting_at_any_cursors_loses_and_repeats_nothing(
    db_store: Store, flow: str, cuts: list[int], first: float
) -> None:
    execution_id = f"r-{flow}"
    if await db_store.get_execution(execution_id) is None:  # one run per store, many reconnect plans
        await run_to_the_end(build(flow, db_store), execution_id, flow)
    journal = await db_store.read_journal(execution_id)
    start = round(first * len(journal))  # the cursor the consumer first comes back with
    cursor, seen = start, []
    for reads in cuts:
        async with events(db_store, execution_id, after=cursor) as stream:
            async for event in stream:
                seen.append(event)
                if len(seen) % reads == 0:
                    break  # the consumer goes away mid-stream
        cursor = next((e.cursor for e in reversed(seen) if e.cursor is not None), cursor)
    async with events(db_store, execution_id, after=cursor) as stream:
        seen += await drain(stream)
    assert journaled(seen) == as_events(journal[start:])


async def test_a_follower_that_reconnects_while_the_run_goes_on_sees_each_event_once(store: Store) -> None:
    chain = build("approval", store)
    paused = await chain.run({}, execution_id="live")
    assert paused.status == "paused"
    seen: list[Event] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(chain.resume, "live", Resume(approved=True))
        cursor = 0
        while not seen or seen[-1].type != "execution_completed":
            async with events(store, "live", after=cursor, live=False) as stream:
                async for event in stream:
                    seen.append(event)
                    break  # one event a connection
            cursor = seen[-1].cursor or cursor
    assert journaled(seen) == as_events(await store.read_journal("live"))


def lookup(order: str) -> str:
    """Look an order up."""
    return f"order {order}: $120"


async def test_tokens_stream_between_the_steps_around_them_and_make_up_their_turn(store: Store) -> None:
    text = "Refunds of up to $500 are approved at once; larger ones wait for a manager."
    agent = Agent("talker", llm=ScriptedLLM([ToolCall("lookup", {"order": "7"}), text], chunk=5), tools=[lookup],
                  store=store)
    async with agent.stream("hello", execution_id="t") as stream:
        seen = await drain(stream)
    kinds = [e.type for e in seen]
    tokens = [e for e in seen if e.type == "token"]
    first, last = kinds.index("token"), len(kinds) - 1 - kinds[::-1].index("token")
    # After the tool's result (journaled before the second turn began), before the turn they make up.
    assert kinds.index("tool_result") < first and last < len(kinds) - 1 - kinds[::-1].index("llm_turn")
    assert kinds[first:last + 1] == ["token"] * len(tokens)
    assert "".join(t.text for t in tokens if t.type == "token") == text
    journal_turn = next(e for e in await store.read_journal("t") if e.label == "turn:2")
    assert journal_turn.payload["result"]["content"] == text  # type: ignore[index,call-overload]
    # A follower that comes later sees the whole message, and no token.
    async with events(store, "t") as later:
        replayed = await drain(later)
    assert "token" not in {e.type for e in replayed}
    last_turn = [e for e in replayed if e.type == "llm_turn"][-1]
    assert last_turn.type == "llm_turn" and last_turn.message["content"] == text  # type: ignore[index,call-overload]


async def test_a_reader_that_never_reads_costs_the_run_nothing_and_loses_only_tokens(store: Store) -> None:
    text = "x" * 300
    agent = Agent("talker", llm=ScriptedLLM([text], chunk=1), store=store)
    await agent.start("hello", execution_id="slow")  # queued: a follower can open before it runs
    async with events(store, "slow", buffer=10) as stream:
        done = await agent.run("hello", execution_id="slow")  # while the follower reads nothing
        assert done.status == "completed" and done.output == text
        seen = await drain(stream)
    [dropped] = [e for e in seen if e.type == "dropped"]
    kept = [e for e in seen if e.type == "token"]
    assert dropped.type == "dropped" and dropped.count == 290 and len(kept) == 10
    assert journaled(seen) == as_events(await store.read_journal("slow"))


async def test_a_follower_in_another_process_sees_the_run_to_its_end(db_store: Store, tmp_path: Any) -> None:
    chain = build("approval", db_store)
    assert (await chain.run({}, execution_id="far")).status == "paused"
    url = store_url(db_store)
    async with events(db_store, "far", live=False) as stream:
        seen = [await anext(stream) for _ in range(len(await db_store.read_journal("far")))]
        assert seen[-1].type == "execution_paused"
        decider = await anyio.open_process(
            [sys.executable, "-m", "tether.runtime.ops", "--store", url, "resume", "far", "--set", "approved=true",
             "--app", "tests.testing.flows:approval"], env={**os.environ, "PYTHONPATH": os.getcwd()},
            stdout=subprocess.DEVNULL)
        async with decider:
            with anyio.fail_after(60):  # what another process writes arrives here, without polling the journal
                seen += await drain(stream)
            assert await decider.wait() == 0
    assert seen[-1].type == "execution_completed"
    assert journaled(seen) == as_events(await db_store.read_journal("far"))


def store_url(store: Store) -> str:
    if isinstance(store, SQLiteStore):
        return f"sqlite:///{store.path}"
    assert isinstance(store, PostgresStore)
    return f"{store.dsn}{'&' if '?' in store.dsn else '?'}schema={store.schema}"


async def test_a_stream_says_what_the_run_raised(store: Store) -> None:
    await build("line", store).run({}, execution_id="taken")
    other = Chain("other", [lambda state: {}], store=store)
    with pytest.raises(ConfigurationError, match="was started at 'chain:line'"):
        async with other.stream({}, execution_id="taken") as stream:
            await drain(stream)


async def test_a_finished_execution_streams_its_history_and_ends(store: Store) -> None:
    chain = build("line", store)
    await chain.run({}, execution_id="old")
    async with chain.events("old") as stream:
        seen = await drain(stream)
    assert seen[0].type == "execution_started" and seen[-1].type == "execution_completed"
    async with chain.events("old", after=seen[-1].cursor or 0) as stream:
        assert await drain(stream) == []  # caught up with a finished run: nothing more, at once


async def test_until_paused_stops_at_the_latest_pause_not_an_earlier_one(store: Store) -> None:
    def ask(state: dict[str, Any]) -> dict[str, Any]:
        return {"first": interrupt("first").approved}

    def ask_again(state: dict[str, Any]) -> dict[str, Any]:
        return {"second": interrupt("second").approved}

    chain = Chain("twice", [ask, ask_again], store=store)
    await chain.run({}, execution_id="w")
    await chain.resume("w", Resume(approved=True))
    async with events(store, "w", until="paused") as stream:
        seen = await drain(stream)
    assert [e.type for e in seen].count("execution_paused") == 2  # it went past the first pause
    assert seen[-1].type == "execution_paused"


async def test_events_read_back_from_json_as_their_own_type(store: Store) -> None:
    seen = await run_to_the_end(build("agent", store), "j", "agent")
    for event in seen:
        assert EVENTS.validate_json(event.model_dump_json()) == event


@pytest.mark.parametrize(("options", "problem"), [
    ({"after": -1}, ConfigurationError), ({"after": "3"}, ConfigurationError),
    ({"until": "done"}, ConfigurationError), ({"buffer": 0}, ConfigurationError),
])
async def test_bad_arguments_are_refused_before_anything_is_followed(
    store: Store, options: dict[str, Any], problem: type[Exception]
) -> None:
    await build("line", store).run({}, execution_id="b")
    with pytest.raises(problem):
        async with events(store, "b", **options):
            pass


async def test_an_unknown_execution_is_not_found(store: Store) -> None:
    with pytest.raises(ExecutionNotFound):
        async with events(store, "nobody"):
            pass


async def test_an_error_in_the_block_comes_out_as_itself_and_stops_the_run(store: Store) -> None:
    chain = build("approval", store)

    async def stop_at_the_first_event() -> None:
        async with chain.stream({}, execution_id="oops") as stream:
            async for _ in stream:
                raise KeyError("mine")

    with pytest.raises(KeyError, match="mine"):
        await stop_at_the_first_event()
    execution = await store.get_execution("oops")
    assert execution is not None and not execution.finished  # recoverable, as any interrupted run


async def journal_of_length(store: Store, execution_id: str, entries: int, status: str) -> None:
    """An execution whose journal holds ``entries`` steps and then its verdict, written directly."""
    started = await store.start_execution(
        NewExecution(execution_id=execution_id, runner="Chain", root_path="chain:long"), owner="me", lease_seconds=60)
    assert started.lease is not None
    for first in range(0, entries, 100):
        await store.append(started.lease, [NewEntry(path="chain:long", label=f"node:n{i}", payload={"step": "k"})
                                           for i in range(first, min(first + 100, entries))])
    await store.release_lease(started.lease, status=status,  # type: ignore[arg-type]
                              entries=[NewEntry(path="chain:long", label=status, payload={})])


@pytest.mark.parametrize("status", ["completed", "paused"])
async def test_a_journal_longer_than_a_page_is_followed_to_its_last_event(store: Store, status: str) -> None:
    await journal_of_length(store, "long", 1234, status)
    async with events(store, "long", until="paused") as stream:
        seen = await drain(stream)
    assert [e.cursor for e in seen] == list(range(1, 1236))
    assert seen[-1].type == f"execution_{status}"


async def test_a_follower_that_comes_back_at_the_pause_itself_ends_there(store: Store) -> None:
    chain = build("approval", store)
    async with chain.stream({}, execution_id="again") as stream:
        await drain(stream)
    async with events(store, "again", after=stream.cursor, until="paused") as later:
        with anyio.fail_after(30):
            assert await drain(later) == []  # it still waits: nothing more, and it says so at once


async def test_a_pause_journaled_without_its_verdict_ends_a_follower_until_paused(store: Store) -> None:
    # As a run paused by a tether that did not journal verdicts, or a migrated one.
    started = await store.start_execution(
        NewExecution(execution_id="old", runner="Chain", root_path="chain:c"), owner="me", lease_seconds=60)
    assert started.lease is not None
    await store.append(started.lease, [NewEntry(path="chain:c", label="node:a", payload={"step": "k"})])
    await store.release_lease(started.lease, status="paused")
    async with events(store, "old", until="paused") as stream:
        with anyio.fail_after(30):
            assert [e.type for e in await drain(stream)] == ["node_finished"]


async def test_a_fork_at_the_verdict_is_followed_to_its_own(store: Store) -> None:
    chain = build("line", store)
    await chain.run({}, execution_id="orig")
    verdict = (await store.read_journal("orig"))[-1]
    assert verdict.label == "completed"
    await chain.fork("orig", at=verdict.seq, new_execution_id="copy")
    async with events(store, "copy") as stream:
        seen = await drain(stream)
    assert [e.type for e in seen].count("execution_completed") == 1 and seen[-1].type == "execution_completed"


def shout(state: dict[str, Any]) -> dict[str, Any]:
    """A sync node: it runs in a worker thread, and streams from there."""
    emit(TokenDelta, text="from a thread")
    return {"shouted": True}


async def test_a_sync_node_streams_from_its_worker_thread(store: Store) -> None:
    chain = Chain("loud", [shout], store=store)
    async with chain.stream({}, execution_id="loud") as stream:
        with anyio.fail_after(30):
            seen = await drain(stream)
    assert [e.text for e in seen if e.type == "token"] == ["from a thread"]
    assert seen[-1].type == "execution_completed"


async def test_live_events_stay_with_their_own_database(tmp_path: Any) -> None:
    async with SQLiteStore(tmp_path / "a.db") as mine, SQLiteStore(tmp_path / "b.db") as theirs:
        await Chain("loud", [shout], store=mine).start({}, execution_id="same")
        async with events(mine, "same") as stream:
            await Chain("loud", [shout], store=theirs).run({}, execution_id="same")  # another tenant's run
            await Chain("loud", [shout], store=mine).run({}, execution_id="same")
            seen = await drain(stream)
    assert [e.text for e in seen if e.type == "token"] == ["from a thread"]  # its own, once


def test_an_event_with_a_lone_surrogate_is_still_sendable() -> None:
    from tether.runtime import ExecutionCompleted
    from tether.runtime.ops._sse import encode

    event = ExecutionCompleted(execution_id="x", path="chain:c", label="completed", cursor=3, output="\ud83d")
    sent = encode(event).encode("utf-8")  # would raise UnicodeEncodeError if the stream could not carry it
    assert json.loads(sent.split(b"data: ", 1)[1])["output"] == "\ud83d"  # as a browser's JSON.parse reads it
