"""`crash_at` stops a run as a SIGKILL would: the boundary stands, nothing after it is written."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from tether.actors import Chain
from tether.runtime import Resume, cancel, sleep
from tether.runtime.testing import Effects, crash_at
from tether.stores import Store

from tests.testing.flows import build, effect


async def journal(store: Store, execution_id: str) -> list[str]:
    return [f"{e.path}/{e.label}" for e in await store.read_journal(execution_id)]


async def test_nothing_after_the_boundary_reaches_the_store(tether_store: Store) -> None:
    chain = build("line", tether_store)
    async with crash_at("node:n2") as point:
        await chain.run({}, execution_id="l-1")

    assert point.happened
    assert point.boundaries == ["chain:line/inbox", "chain:line/node:n1", "chain:line/node:n2"]
    assert await journal(tether_store, "l-1") == point.boundaries
    execution = await tether_store.get_execution("l-1")
    assert execution is not None
    # As after a SIGKILL: still running, and the dead run's lease was not handed back.
    assert execution.status == "running" and execution.lease_owner is not None


async def test_recovery_takes_the_dead_lease_at_once_and_does_not_redo_the_journaled(tether_store: Store) -> None:
    chain = build("line", tether_store)
    with Effects() as effects:
        async with crash_at("chain:line/node:n3"):  # a full path names the same boundary
            await chain.run({}, execution_id="l-2")
        result = await chain.resume("l-2")

    assert result.status == "completed"
    assert result.output["counts"] == {"n1": 1, "n2": 1, "n3": 1, "n4": 1}
    effects.assert_exactly_once(effect, calls=4)
    labels = await journal(tether_store, "l-2")
    assert labels.count("chain:line/node:n3") == 1 and labels.count("chain:line/node:n4") == 1


async def test_a_numbered_boundary_counts_writes_across_run_and_resume(tether_store: Store) -> None:
    chain = build("approval", tether_store)
    # inbox, validate, suspended; then the resume: approve, and the last node's write, which
    # goes with the message's boundary and the outcome (the run completed as the process died).
    async with crash_at(5) as point:
        paused = await chain.run({}, execution_id="a-1")
        assert paused.status == "paused"
        await chain.resume("a-1", Resume(approved=True))

    assert point.writes == 5 and point.boundaries[-1] == "chain:approval/msg:1"
    result = await chain.resume("a-1")
    assert result.status == "completed" and result.output["approved"] is True


async def test_a_crash_right_after_the_suspension_still_asks_for_the_decision(tether_store: Store) -> None:
    chain = build("approval", tether_store)
    async with crash_at("suspended"):
        await chain.run({}, execution_id="a-2")

    [pending] = await tether_store.list_pending(execution_id="a-2")
    assert pending.agent_path == "chain:approval/node:approve"
    result = await chain.resume("a-2", Resume(approved=False))  # claims despite the dead run's lease
    assert result.status == "completed" and result.output["approved"] is False


async def test_code_under_test_cannot_swallow_the_crash(tether_store: Store) -> None:
    after: list[str] = []

    async def stubborn(state: dict[str, Any]) -> dict[str, Any]:
        try:
            await sleep(0)  # a durable timer: its due time is a journal write, where the crash comes
        except Exception:
            after.append("caught")
        after.append("carried on")
        return {}

    chain = Chain("stubborn", [stubborn], store=tether_store)
    async with crash_at("chain:stubborn/sleep") as point:
        await chain.run({}, execution_id="s-1")
    assert point.happened and after == []
    result = await chain.resume("s-1")
    assert result.status == "completed" and after == ["carried on"]


async def test_a_boundary_never_reached_fails_and_names_what_was_written(tether_store: Store) -> None:
    chain = build("line", tether_store)
    with pytest.raises(AssertionError, match=r"never reached that boundary.*chain:line/node:n3', 'chain:line/msg:1'\]"):
        async with crash_at("node:n9"):
            await chain.run({}, execution_id="l-3")
    assert (await tether_store.get_execution("l-3")).status == "completed"  # type: ignore[union-attr]


async def test_a_run_that_fails_before_the_boundary_is_no_crash(tether_store: Store) -> None:
    def broken(state: dict[str, Any]) -> dict[str, Any]:
        raise ValueError("boom")

    chain = Chain("broken", [broken], store=tether_store)
    with pytest.raises(AssertionError, match="never reached"):
        async with crash_at("node:later"):
            result = await chain.run({}, execution_id="b-1")
    assert result.status == "failed" and "boom" in (result.error or "")


@pytest.mark.parametrize("at", [0, -1, "", True])
def test_a_boundary_must_be_a_label_or_a_write_number(at: Any) -> None:
    with pytest.raises(ValueError, match="boundary's label"):
        crash_at(at)


async def test_a_parallel_branch_write_lands_before_the_boundary_or_never(tether_store: Store) -> None:
    chain = build("fanout", tether_store)
    async with crash_at("node:c") as point:
        await chain.run({}, execution_id="f-1")
    labels = await journal(tether_store, "f-1")
    assert labels[-1] == point.boundaries[-1] == "chain:fanout/node:c"
    assert labels == point.boundaries
    output = (await chain.resume("f-1")).output
    assert output["b"] is output["c"] is output["d"] is True and output["counts"]["d"] == 1


async def test_a_decision_recorded_after_a_crash_leaves_the_dead_lease_to_the_resume(tether_store: Store) -> None:
    chain = build("approval", tether_store)
    async with crash_at("suspended"):
        await chain.run({}, execution_id="a-3")
    await chain.decide("a-3", Resume(approved=True))  # a decision only, as the HTTP API records it
    result = await chain.resume("a-3")  # carries it out at once, over the dead run's lease
    assert result.status == "completed" and result.output["approved"] is True


async def test_a_cancel_after_a_crash_takes_the_dead_lease_at_once(tether_store: Store) -> None:
    chain = build("approval", tether_store)
    async with crash_at("suspended"):
        await chain.run({}, execution_id="a-4")
    # As on the same machine after a SIGKILL: carried out now, not once the lease (30 s) runs out.
    with anyio.fail_after(10):
        result = await cancel(tether_store, "a-4", reason="withdrawn", wait=0)
    assert result.status == "cancelled"
    assert await tether_store.list_pending(execution_id="a-4") == []
    labels = await journal(tether_store, "a-4")
    assert not any(label.endswith("/takeover") for label in labels)  # a dead run's lease is inherited, not forced
