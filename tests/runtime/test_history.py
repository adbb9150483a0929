"""`history` and `fork`: every boundary of a run, and new runs from any of them."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel
from tether.runtime import Actor, Resume, Runtime, Start, fork, history
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
        assert [e.payload for e in lineage] == [{"from": "orig", "at": b.seq, "label": b.label, "updated": False}]
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
