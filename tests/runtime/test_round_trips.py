"""How many store calls a resume, a recovery and a decision make before user code runs.

Each store method is one transaction (the `Store` contract), so the calls
counted here are the round trips a resume waits for before the resumed node
runs. The store is opened before counting starts: ``setup`` on an open store
does no I/O, so it is not counted.
"""

from __future__ import annotations

import inspect
from typing import Any

from tether.actors import Chain
from tether.runtime import Resume, interrupt
from tether.runtime.testing import crash_at
from tether.stores import Store


class Counting:
    """A store that notes the name of every call it forwards."""

    def __init__(self, store: Store, calls: list[str]) -> None:
        self._store = store
        self._calls = calls

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._store, name)
        if not inspect.iscoroutinefunction(attribute) or name == "setup":
            return attribute

        async def call(*args: Any, **kwargs: Any) -> Any:
            self._calls.append(name)
            return await attribute(*args, **kwargs)

        return call


def approval_chain(store: Store, calls: list[str], seen: list[list[str]]) -> Chain:
    async def approve(state: dict[str, Any]) -> dict[str, Any]:
        decision = interrupt("manager_approval", {"amount": 5})
        seen.append(list(calls))  # what the store was asked before this node went on
        return {"approved": decision.approved}

    def after(state: dict[str, Any]) -> dict[str, Any]:
        seen.append(list(calls))
        return {"done": True}

    chain = Chain("trips", store=Counting(store, calls))  # type: ignore[arg-type]
    chain.add_node(approve)
    chain.add_node(after)
    chain.add_edge("approve", "after")
    return chain


async def test_a_resume_with_a_decision_makes_two_store_calls_before_the_node_runs(store: Store) -> None:
    calls: list[str] = []
    seen: list[list[str]] = []
    chain = approval_chain(store, calls, seen)
    assert (await chain.run({}, execution_id="t-1")).status == "paused"
    calls.clear()
    result = await chain.resume("t-1", Resume(approved=True))
    assert result.status == "completed" and result.output["approved"] is True
    # The execution and its journal together; the claim, which journals the decision and takes the lease.
    assert seen[-2] == ["load_execution", "claim_and_lease"]


async def test_a_recovery_makes_two_store_calls_before_the_node_runs(store: Store) -> None:
    calls: list[str] = []
    seen: list[list[str]] = []
    chain = approval_chain(store, calls, seen)
    async with crash_at("node:approve"):  # approve was decided and ran; the process died after it
        assert (await chain.run({}, execution_id="t-2")).status == "paused"
        await chain.decide("t-2", Resume(approved=True))
        await chain.resume("t-2")
    calls.clear()
    seen.clear()
    result = await chain.resume("t-2")
    assert result.status == "completed"
    # The dead run's lease is inherited (a test's crash), so no takeover entry is written.
    assert seen == [["load_execution", "acquire_lease"]]


async def test_a_decision_alone_makes_two_store_calls(store: Store) -> None:
    calls: list[str] = []
    chain = approval_chain(store, calls, [])
    assert (await chain.run({}, execution_id="t-3")).status == "paused"
    calls.clear()
    await chain.decide("t-3", Resume(approved=True))
    # The journal, to check the decision against the type the call expects; the claim.
    assert calls == ["read_journal", "claim"]
    assert (await store.get_execution("t-3")).status == "decided"  # type: ignore[union-attr]
