"""`history` and `fork`: every boundary of a run, and new runs from any of them."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError
from tether.actors import Chain
from tether.runtime import Actor, Resume, Runtime, Start, fork, history, interrupt
from tether.runtime.testing import Effects
from tether.stores import ConfigurationError, ExecutionNotFound, Store

from tests.testing.flows import build, effect


async def journal_of(store: Store, execution_id: str) -> list[dict[str, Any]]:
    return [e.model_dump(mode="json") for e in await store.read_journal(execution_id)]


@pytest.mark.parametrize("flow", ["fanout", "agent", "approval"])
async def test_a_fork_at_every_boundary_ends_as_the_run_did_and_leaves_it_untouched(store: Store, flow: str) -> None:
    runner = build(flow, store)
    start = {"agent": "go"}.get(flow, {})
    first = await runner.run(start, execution_id="orig")
    if first.status == "paused":
        first = await runner.resume("orig", Resume(approved=True))
    assert first.status == "completed"
    before = await journal_of(store, "orig")
    boundaries = await history(store, "orig")
    assert [b.seq for b in boundaries] == list(range(1, len(before) + 1))
    for b in boundaries:
        forked = await runner.fork("orig", at=b.seq, new_execution_id=f"fork-{b.seq}")
        if forked.status == "paused":  # forked before the decision: it asks again
            forked = await runner.resume(f"fork-{b.seq}", Resume(approved=True))
        assert (forked.status, forked.output) == (first.status, first.output), b
        lineage = [e for e in await store.read_journal(f"fork-{b.seq}") if e.label == "fork"]
        assert [e.payload for e in lineage] == [
            {"from": "orig", "at": b.seq, "label": b.label, "updated": False, "effects": "again"}]
    assert await journal_of(store, "orig") == before


async def test_what_comes_after_the_boundary_runs_again_side_effects_included(store: Store) -> None:
    chain = build("line", store)
    with Effects() as effects:
        await chain.run({}, execution_id="l")
        await chain.fork("l", at="node:n2", new_execution_id="l2")
    # n1 and n2 are in the fork's journal; n3 and n4 ran again, under the fork's own keys.
    counts = effects.count(effect)
    assert len(counts) == 6 and set(counts.values()) == {1}
    assert sorted(key.split("|")[0] for key in counts) == ["l"] * 4 + ["l2"] * 2


async def test_a_fork_that_reuses_effects_answers_the_originals_calls_from_its_records(store: Store) -> None:
    chain = build("line", store)
    with Effects() as effects:
        first = await chain.run({}, execution_id="l")
        replay = await chain.fork("l", at="node:n2", new_execution_id="l2", effects="reuse")
    assert replay.output == first.output
    assert sorted(key.split("|")[0] for key in effects.count(effect)) == ["l"] * 4  # the fork ran none again
    assert {r.key.split("|")[0] for r in await store.list_idempotent("l2")} == {"l2"}
    [lineage] = [e.payload for e in await store.read_journal("l2") if e.label == "fork"]
    assert lineage["effects"] == "reuse"  # type: ignore[index,call-overload]


async def test_a_reusing_fork_of_a_supervisor_runs_no_worker_effect_again(store: Store) -> None:
    boss = build("supervisor", store)
    with Effects() as effects:
        first = await boss.run("go", execution_id="s")
        # Forked before the delegations: the workers' messages come after the boundary.
        replay = await boss.fork("s", at="turn:1", new_execution_id="s2", effects="reuse")
    assert replay.output == first.output
    assert not [key for key in effects.count(effect) if key.startswith("s2|")]


async def test_a_fork_that_reuses_effects_runs_the_calls_that_differ(store: Store) -> None:
    llm_tools = build("agent", store)
    with Effects() as effects:
        await llm_tools.run("go", execution_id="a")
        turns = [b for b in await history(store, "a") if b.label == "turn:1"]
        changed = {**turns[0].value, "tool_calls": [{"name": "lookup", "arguments": {"order": "B"}, "id": "c1"}]}
        await llm_tools.fork("a", at=turns[0].seq, new_execution_id="a2", update=changed, effects="reuse")
    # lookup(B) is new and runs; notify(A) in the next turn is the original's call, answered from its record.
    ran = [key.split("|")[3] for key in effects.count(effect) if key.startswith("a2|")]
    assert ran == ["tool:lookup"]


async def test_an_update_replaces_a_steps_result_and_what_follows_changes(store: Store) -> None:
    chain = build("approval", store)
    await chain.run({}, execution_id="a")
    done = await chain.resume("a", Resume(approved=True))
    assert done.output["approved"] is True
    changed = await chain.fork("a", at="node:approve", new_execution_id="a-no", update={"approved": False})
    assert changed.status == "completed" and changed.output["approved"] is False
    [decision] = [b for b in await history(store, "a") if b.kind == "resumed"]
    redecided = await chain.fork("a", at=decision.seq, new_execution_id="a-re",
                                 update={"approved": False, "metadata": {}})
    assert redecided.output["approved"] is False
    original = await store.get_execution("a")
    assert original is not None and original.result["approved"] is True  # type: ignore[index,call-overload]


async def test_bad_fork_requests_are_refused_and_change_nothing(store: Store) -> None:
    chain = build("line", store)
    await chain.run({}, execution_id="x")
    await chain.run({}, execution_id="taken")
    taken = await journal_of(store, "taken")
    with pytest.raises(ExecutionNotFound):
        await fork(store, "nobody", at=1, new_execution_id="y")
    with pytest.raises(ConfigurationError, match=r"no boundary 'node:zz'.*1 chain:line/inbox"):
        await fork(store, "x", at="node:zz", new_execution_id="y")
    with pytest.raises(ConfigurationError, match="no boundary 99"):
        await fork(store, "x", at=99, new_execution_id="y")
    with pytest.raises(ConfigurationError, match="holds no result or decision"):
        await fork(store, "x", at="inbox", new_execution_id="y", update={"n": 1})
    assert await store.get_execution("y") is None
    with pytest.raises(ConfigurationError, match="'taken' already exists"):
        await fork(store, "x", at=2, new_execution_id="taken")
    assert await journal_of(store, "taken") == taken
    await chain.start({}, execution_id="queued")
    with pytest.raises(ConfigurationError, match="never started"):
        await fork(store, "queued", at=1, new_execution_id="z")


class Tally(BaseModel):
    seen: list[int] = []
    total: int = 0


class Counter(Actor[Tally]):
    kind = "counter"

    async def receive(self, message: Start) -> None:
        for n in message.input:  # type: ignore[union-attr]
            child = await self.context.spawn(Adder, f"add{n}", durable=True)
            self.state.total += await child.ask(Start(input=n))
            self.state.seen.append(n)
        self.context.finish(self.state.total)


class Adder(Actor[Tally]):
    kind = "adder"

    async def receive(self, message: Start) -> int:
        self.state.total += message.input  # type: ignore[operator]
        return self.state.total


async def test_history_gives_each_boundary_its_actors_state_as_of_it(store: Store) -> None:
    async with Runtime(store) as rt:
        result = await rt.run(Counter, [2, 3], execution_id="c")
    assert result.output == 5
    boundaries = await history(store, "c")
    handled = [b for b in boundaries if b.label.startswith("msg:")]
    assert [(b.path, b.state) for b in handled] == [
        ("counter:counter/adder:add2", {"total": 2}),
        ("counter:counter/adder:add3", {"total": 3}),
        ("counter:counter", {"seen": [2, 3], "total": 5}),
    ]
    assert handled[0].value == {"reply": 2}
    [inbox] = [b for b in boundaries if b.label == "inbox" and b.path == "counter:counter"]
    assert inbox.value == {"type": "Start", "data": {"input": [2, 3]}} and inbox.state == {}
    with pytest.raises(ExecutionNotFound):
        await history(store, "nobody")


class Amount(BaseModel):
    amount: int


async def test_a_fork_at_a_suspension_checks_its_decision_against_the_calls_type(store: Store) -> None:
    def ask(state: dict[str, Any]) -> dict[str, Any]:
        return {"amount": interrupt("how much", {}, expect=Amount).amount}

    chain = Chain("typed", [ask], store=store)
    assert (await chain.run({}, execution_id="o")).status == "paused"
    [suspended] = [b for b in await history(store, "o") if b.kind == "suspended"]
    forked = await chain.fork("o", at=suspended.seq, new_execution_id="f")
    assert forked.status == "paused"  # asked again: two unanswered suspensions at one path in its journal
    with pytest.raises(ValidationError):
        await chain.resume("f", Resume(approved=True))
    assert len(await store.list_pending(execution_id="f")) == 1  # the wrong type consumed nothing
    assert (await chain.resume("f", {"amount": 5})).output == {"amount": 5}


async def test_an_update_of_a_decision_is_checked_before_anything_is_written(store: Store) -> None:
    chain = build("approval", store)
    await chain.run({}, execution_id="a")
    await chain.resume("a", Resume(approved=True))
    [decision] = [b for b in await history(store, "a") if b.kind == "resumed"]
    with pytest.raises(ValidationError):
        await fork(store, "a", at=decision.seq, new_execution_id="bad", update={"approve": "yes"})
    assert await store.get_execution("bad") is None


class _Racy:
    """A store on which another process resumes the run while this one waits for the lease."""

    def __init__(self, store: Store, chain: Any) -> None:
        self._store, self.chain, self.armed = store, chain, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def acquire_lease(self, execution_id: str, **kwargs: Any) -> Any:
        if self.armed:
            self.armed = False
            await self.chain.resume(execution_id)  # carries the decision out, pauses at the next ask
        return await self._store.acquire_lease(execution_id, **kwargs)


async def test_a_journal_read_before_another_process_held_the_lease_is_read_again(store: Store) -> None:
    ran: list[str] = []

    def ask(state: dict[str, Any]) -> dict[str, Any]:
        return {"a": interrupt("first", {}).approved}

    def side(state: dict[str, Any]) -> dict[str, Any]:
        ran.append("side")
        return {"n": len(ran)}

    def ask2(state: dict[str, Any]) -> dict[str, Any]:
        return {"b": interrupt("second", {}).approved}

    racy = _Racy(store, None)
    chain = Chain("racy", [ask, side, ask2], store=racy)  # type: ignore[arg-type]
    racy.chain = Chain("racy", [ask, side, ask2], store=store)
    assert (await chain.run({}, execution_id="r")).status == "paused"
    racy.armed = True
    result = await chain.resume("r", Resume(approved=True))
    assert result.status == "paused" and [p.agent_path for p in result.pending] == ["chain:racy/node:ask2"]
    assert ran == ["side"]  # not again: this process replayed what the other one journaled
    labels = [e.label for e in await store.read_journal("r")]
    assert labels.count("node:side") == 1
