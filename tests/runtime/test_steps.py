"""Durable steps inside one message: replayed from the journal, never run twice."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel
from tether.runtime import Actor, ActorCrashed, Executions, Runtime, Start
from tether.stores import NewEntry, NewExecution, SerializationError, Store, UsageError

RAN: list[str] = []


def validate(amount: int) -> dict[str, Any]:  # synchronous: runs in a worker thread
    RAN.append("validate")
    return {"valid": amount > 0}


async def charge(amount: int) -> dict[str, Any]:
    RAN.append("charge")
    return {"charged": amount}


class Flow(Actor[BaseModel]):
    kind = "flow"
    crashed = False

    async def receive(self, message: Start) -> Any:
        amount = message.input
        state: dict[str, Any] = {}
        state |= await self.context.step("node:validate", validate, amount)
        state |= await self.context.step("node:charge", charge, amount)
        if not Flow.crashed:
            Flow.crashed = True
            raise RuntimeError("crash between two steps")
        state |= await self.context.step("node:notify", charge, 0)
        return state


async def test_steps_are_replayed_after_a_crash(store: Store) -> None:
    RAN.clear()
    Flow.crashed = False
    async with Runtime(store) as rt:
        flow = await rt.spawn(Flow, "f", durable=True)
        # The handler crashes after two steps; the restarted actor handles the message
        # again, and the two finished steps return their records instead of running.
        state = await flow.ask(Start(input=40))
    assert state == {"valid": True, "charged": 0}
    assert RAN == ["validate", "charge", "charge"]  # the last one is node:notify


class Once(Actor[BaseModel]):
    kind = "chain"

    async def receive(self, message: Start) -> Any:
        state = await self.context.step("node:validate", validate, 5)
        state |= await self.context.step("node:charge", charge, 5)
        state |= await self.context.step("node:loop", charge, 1)
        state |= await self.context.step("node:loop", charge, 2)
        self.context.finish(state)


async def test_step_results_are_journaled_with_their_labels(store: Store) -> None:
    RAN.clear()
    async with Runtime(store) as rt:
        done = await rt.run(Once, None, execution_id="once", name="refund")
    assert done.output == {"valid": True, "charged": 2}
    labels = [e.label for e in await store.read_journal("once") if e.label.startswith("node:")]
    assert labels == ["node:validate", "node:charge", "node:loop", "node:loop"]
    assert RAN == ["validate", "charge", "charge", "charge"]


async def test_a_step_needs_a_durable_actor() -> None:
    class Plain(Actor[BaseModel]):
        async def receive(self, message: Any) -> Any:
            return await self.context.step("node:x", charge, 1)

    async with Runtime() as rt:
        ref = await rt.spawn(Plain, "p")
        with pytest.raises(ActorCrashed) as info:
            await ref.ask("go")
        assert isinstance(info.value.__cause__, UsageError)


async def test_a_step_result_that_is_not_json_is_refused_and_records_nothing(store: Store) -> None:
    async def opaque() -> object:
        return object()

    class Opaque(Actor[BaseModel]):
        kind = "flow"

        async def receive(self, message: Start) -> Any:
            if message.input == "bad":
                return await self.context.step("node:opaque", opaque)
            return await self.context.step("node:fine", charge, 1)

    async with Runtime(store) as rt:
        ref = await rt.spawn(Opaque, "o", durable=True, restart="temporary")
        with pytest.raises(ActorCrashed) as info:
            await ref.ask(Start(input="bad"))
        assert isinstance(info.value.__cause__, SerializationError)
        assert "node:opaque" in str(info.value.__cause__)
        assert "Return JSON data or a pydantic model" in str(info.value.__cause__)
    assert not [e for e in await store.read_journal("flow:o") if e.label == "node:opaque"]


class Halting(Actor[BaseModel]):
    kind = "flow"
    halt = True

    async def receive(self, message: Start) -> Any:
        state = await self.context.step("node:validate", validate, message.input)
        if Halting.halt:
            raise RuntimeError("the process dies here")
        return state | await self.context.step("node:charge", charge, message.input)


async def test_a_journal_with_full_step_keys_still_replays_its_steps(store: Store) -> None:
    # Step entries name their step by its key within the message; journals written
    # before that carry the execution, the path and the message in front of it.
    RAN.clear()
    Halting.halt = True
    async with Runtime(store) as rt:
        first = await rt.spawn(Halting, "first", durable=True, restart="temporary")
        with pytest.raises(ActorCrashed):
            await first.ask(Start(input=7))
    inbox, step = await store.read_journal("flow:first")
    assert (inbox.label, step.label) == ("inbox", "node:validate")
    assert isinstance(step.payload, dict) and not step.payload["step"].startswith("flow:first|")
    execution = await store.get_execution("flow:first")
    assert execution is not None

    # The same journal, as an earlier version wrote it, under another actor's name.
    started = await store.start_execution(
        NewExecution(execution_id="flow:second", runner=execution.runner, root_path="flow:second"),
        owner="earlier", lease_seconds=30,
    )
    assert started.lease is not None
    [seq] = await store.append(started.lease, [NewEntry(path="flow:second", label="inbox", payload=inbox.payload)])
    full = f"flow:second|flow:second|inbox:{seq}|{step.payload['step']}"
    await store.append(started.lease, [NewEntry(path="flow:second", label="node:validate",
                                                 payload={**step.payload, "inbox": seq, "step": full})])
    await store.release_lease(started.lease)

    RAN.clear()
    Halting.halt = False
    async with Runtime(store) as rt:
        second = await rt.spawn(Halting, "second", durable=True)
        assert await second.ask(Start(input=8)) == {"valid": True, "charged": 8}
    # The journaled message was handled again first: its validate step replayed, its charge ran.
    assert RAN == ["charge", "validate", "charge"]
    steps = [e.payload for e in await store.read_journal("flow:second") if e.label.startswith("node:")]
    assert [p["inbox"] for p in steps[:2]] == [seq, seq] and len(steps) == 4


class LastThenFails(Actor[BaseModel]):
    kind = "chain"
    fail = True

    async def receive(self, message: Start) -> Any:
        state = await self.context.step("node:charge", charge, 7, last=True)
        if LastThenFails.fail:
            raise ValueError("the handler fails after its last step")
        self.context.finish(state)


async def test_a_last_step_goes_with_the_outcome_and_a_failure_still_records_it(store: Store) -> None:
    RAN.clear()
    LastThenFails.fail = True
    async with Runtime(store) as rt:
        failed = await rt.run(LastThenFails, None, execution_id="last", name="refund")
        assert failed.status == "failed"
        journal = await store.read_journal("last")
        # The step's record is written with the verdict, in the release.
        assert [e.label for e in journal] == ["inbox", "node:charge", "failed"]
        LastThenFails.fail = False
        await Executions(store).retry("last")
        done = await rt.resume(LastThenFails, "last")
    assert done.status == "completed" and done.output == {"charged": 7}
    assert RAN == ["charge"]  # recorded with the failure: the retry did not charge again
