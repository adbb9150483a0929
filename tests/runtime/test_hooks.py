"""A runtime's clock and crash points are the ones it is given, not a module's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
from tether.actors import Chain
from tether.runtime import Actor, ExecutionWorker, NoState, Resume, Runtime, Start, interrupt, sleep
from tether.runtime._core.hooks import Faults, Hooks, installed
from tether.runtime.testing import Clock
from tether.stores import NewEntry, Store

MOMENT = datetime(2031, 5, 1, 12, tzinfo=UTC)


class Asker(Actor[NoState]):
    kind = "asker"

    async def receive(self, message: Start) -> Any:
        decision = interrupt("ok", {}, timeout=timedelta(hours=1), default=Resume(approved=False))
        self.context.finish({"approved": decision.approved})


async def test_a_deadline_is_set_on_the_clock_the_runtime_was_given(store: Store) -> None:
    async with Runtime(store, clock=lambda: MOMENT) as rt:
        paused = await rt.run(Asker, execution_id="given")
    assert paused.pending_interrupt is not None
    assert paused.pending_interrupt.deadline == MOMENT + timedelta(hours=1)
    # The installed default is untouched: another runtime reads the real clock.
    async with Runtime(store) as rt:
        other = await rt.run(Asker, execution_id="real")
    assert other.pending_interrupt is not None and other.pending_interrupt.deadline is not None
    assert abs(other.pending_interrupt.deadline - (datetime.now(UTC) + timedelta(hours=1))) < timedelta(minutes=5)


async def test_a_runtime_keeps_the_clock_it_was_made_with(store: Store) -> None:
    rt = Runtime(store, clock=lambda: MOMENT)
    with Clock(MOMENT + timedelta(days=30)):  # installed after: not this runtime's
        async with rt:
            paused = await rt.run(Asker, execution_id="kept")
    assert paused.pending_interrupt is not None and paused.pending_interrupt.deadline == MOMENT + timedelta(hours=1)


async def test_a_worker_decides_deadlines_on_its_own_clock(store: Store) -> None:
    chain = Chain("timed", store=store)

    def approve(state: dict[str, Any]) -> dict[str, Any]:
        return {"approved": interrupt("ok", {}, timeout=timedelta(days=2), default=Resume(approved=False)).approved}

    chain.add_node(approve)
    with Clock(MOMENT):
        assert (await chain.run({}, execution_id="w")).status == "paused"
    later = MOMENT + timedelta(days=2, seconds=1)
    results = []
    async with ExecutionWorker(store, [chain], clock=lambda: later, on_result=results.append) as worker:
        with anyio.fail_after(30):
            await worker.serve(until_idle=True)
    assert [(r.execution_id, r.output) for r in results] == [("w", {"approved": False})]


async def test_a_durable_sleep_parks_until_the_runtimes_clock_passes_it(store: Store) -> None:
    chain = Chain("nap", store=store)

    async def nap(state: dict[str, Any]) -> dict[str, Any]:
        await sleep(3600)
        return {"woke": True}

    chain.add_node(nap)
    with Clock(MOMENT):
        assert (await chain.run({}, execution_id="n")).status == "paused"
    assert (await store.get_execution("n")).wake_at == MOMENT + timedelta(hours=1)  # type: ignore[union-attr]


def test_faults_count_their_own_writes_and_are_read_from_the_environment() -> None:
    assert Faults.from_environ({"TETHER_FAULTS": "after_claim,write:3,at:node:x"}).armed == {
        "after_claim", "write:3", "at:node:x"}
    quiet = Faults()
    quiet.wrote([NewEntry(path="chain:c", label="node:x")])
    quiet.reached("after_claim")  # nothing armed: nothing happens
    assert quiet.writes == 0  # counted only while write:N is armed
    hooks = Hooks()
    assert hooks.replace(clock=lambda: MOMENT).now() == MOMENT
    assert hooks.replace(clock=lambda: MOMENT).heirs is hooks.heirs  # a crash's heirs outlive the helper
    assert installed().now().tzinfo is not None
