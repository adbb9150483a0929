"""Chain: graph semantics, pauses and typed state, on every store and both backends."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from pydantic import BaseModel
from tether.actors import Chain
from tether.runtime import AlreadyResumed, Resume, idempotent, interrupt
from tether.stores import ConfigurationError, Store

RUNS: Counter[str] = Counter()
SENT: list[str] = []


@pytest.fixture(autouse=True)
def _clean() -> None:
    RUNS.clear()
    SENT.clear()


def node(name: str, **update: Any) -> Any:
    def fn(state: Any) -> dict[str, Any]:
        RUNS[name] += 1
        return {name: True, **update}

    fn.__name__ = name
    return fn


@idempotent
def send_email(amount: int) -> str:
    SENT.append(f"email {amount}")
    return "sent"


def approve_refund(state: dict[str, Any]) -> dict[str, Any]:
    RUNS["approve_refund"] += 1
    send_email(state["amount"])  # before interrupt(): runs again on resume, sends once
    if state["amount"] > 10_000:
        decision = interrupt("manager_approval", {"amount": state["amount"]})
        return {"approved": decision.approved, "approver": decision.metadata.get("approver")}
    return {"approved": True}


async def test_the_refund_flow(store: Store) -> None:
    chain = Chain("refund", [node("validate"), approve_refund, node("charge"), node("notify")], store=store)
    paused = await chain.run({"amount": 50_000}, execution_id="refund-abc")
    assert paused.status == "paused"
    assert paused.pending_interrupt is not None
    assert paused.pending_interrupt.agent_path == "chain:refund/node:approve_refund"
    done = await chain.resume("refund-abc", Resume(approved=True, metadata={"approver": "alice"}))
    assert done.status == "completed"
    assert done.output == {"amount": 50_000, "validate": True, "approved": True, "approver": "alice",
                           "charge": True, "notify": True}
    assert RUNS == {"validate": 1, "approve_refund": 2, "charge": 1, "notify": 1}
    assert SENT == ["email 50000"]
    with pytest.raises(AlreadyResumed):
        await chain.resume("refund-abc", Resume(approved=False), path="chain:refund/node:approve_refund")
    labels = [e.label for e in await store.read_journal("refund-abc") if e.label.startswith("node:")]
    assert labels == ["node:validate", "node:approve_refund", "node:charge", "node:notify"]


async def test_fan_out_runs_branches_and_joins_once(store: Store) -> None:
    chain = Chain("fan", store=store)
    for name in ("a", "b", "c", "c2", "d"):
        chain.add_node(node(name))
    chain.add_edge("a", "b")
    chain.add_edge("a", "c")
    chain.add_edge("c", "c2")   # the branches are of unequal length
    chain.add_edge("b", "d")
    chain.add_edge("c2", "d")
    done = await chain.run({}, execution_id="fan")
    assert done.status == "completed"
    assert RUNS == {"a": 1, "b": 1, "c": 1, "c2": 1, "d": 1}
    assert done.output == {"a": True, "b": True, "c": True, "c2": True, "d": True}


async def test_conditions_pick_the_branch(store: Store) -> None:
    chain = Chain("route", store=store)
    for name in ("a", "b", "c", "d"):
        chain.add_node(node(name))
    chain.add_edge("a", "b", when=lambda s: s["x"])
    chain.add_edge("a", "c", when=lambda s: not s["x"])
    chain.add_edge("b", "d")
    chain.add_edge("c", "d")
    assert (await chain.run({"x": True}, execution_id="yes")).output == {"x": True, "a": True, "b": True,
                                                                          "d": True}
    assert RUNS["c"] == 0


async def test_a_bounded_cycle(store: Store) -> None:
    chain = Chain("loop", store=store)
    chain.add_node(node("n1"))
    chain.add_node(node("n2"))
    chain.add_edge("n1", "n2")
    chain.add_edge("n2", "n1", max_iterations=3)
    assert (await chain.run({}, execution_id="loop")).status == "completed"
    assert RUNS == {"n1": 4, "n2": 4}


async def test_an_unbounded_cycle_is_refused_before_running(store: Store) -> None:
    chain = Chain("forever", store=store)
    chain.add_node(node("n1"))
    chain.add_node(node("n2"))
    chain.add_edge("n1", "n2")
    chain.add_edge("n2", "n1")
    with pytest.raises(ConfigurationError, match="max_iterations"):
        await chain.run({}, execution_id="forever")
    assert await store.get_execution("forever") is None


async def test_a_chain_changed_after_a_run_is_checked_again(store: Store) -> None:
    chain = Chain("grows", [node("n1"), node("n2")], store=store)
    assert (await chain.run({}, execution_id="first")).status == "completed"
    chain.add_edge("n2", "n1", max_iterations=1)  # allowed: runs, under its new fingerprint
    assert (await chain.run({}, execution_id="second")).status == "completed"
    first, second = await store.get_execution("first"), await store.get_execution("second")
    assert first is not None and second is not None
    assert first.fingerprint != second.fingerprint == chain.fingerprint
    chain.add_edge("n2", "n1")  # closes an unbounded cycle
    with pytest.raises(ConfigurationError, match="max_iterations"):
        await chain.run({}, execution_id="third")
    assert await store.get_execution("third") is None


def test_an_unbounded_cycle_is_named_wherever_it_is() -> None:
    chain = Chain("deep", [node("a"), node("b"), node("c"), node("d"), node("e")])
    chain.add_edge("e", "a", max_iterations=2)  # bounded: allowed
    chain.add_edge("d", "b")  # unbounded: b -> c -> d -> b
    with pytest.raises(ConfigurationError, match=r"without a bound: b -> c -> d -> b\."):
        chain.check()


async def test_a_line_of_thousands_of_nodes_runs() -> None:
    from tether.stores import MemoryStore

    def step(k: int) -> Any:
        async def fn(state: dict[str, Any]) -> dict[str, Any]:
            return {"count": state.get("count", 0) + 1}

        fn.__name__ = f"n{k}"
        return fn

    chain = Chain("long", [step(k) for k in range(3000)], store=MemoryStore())
    done = await chain.run({}, execution_id="long")
    assert done.status == "completed"
    assert done.output == {"count": 3000}


class Refund(BaseModel):
    amount: int
    approved: bool = False
    charged: int = 0


async def test_typed_state(store: Store) -> None:
    def approve(state: Refund) -> dict[str, Any]:
        assert isinstance(state, Refund)
        return {"approved": state.amount < 100}

    async def charge(state: Refund) -> dict[str, Any]:
        return {"charged": state.amount if state.approved else 0}

    chain = Chain("typed", [approve, charge], store=store, state=Refund)
    done = await chain.run(Refund(amount=40), execution_id="typed")
    assert Refund.model_validate(done.output) == Refund(amount=40, approved=True, charged=40)


async def test_an_update_that_breaks_a_typed_state_fails_the_run(store: Store) -> None:
    def approve(state: Refund) -> dict[str, Any]:
        return {"approved": True}

    def charge(state: Refund) -> dict[str, Any]:
        return {"charged": "forty"}  # Refund.charged is an int

    done = await Chain("typed", [approve, charge], store=store, state=Refund).run(Refund(amount=40),
                                                                                 execution_id="broken")
    assert done.status == "failed"
    assert done.error is not None and "charged" in done.error


async def test_a_node_that_changes_its_state_in_place_changes_nobody_elses(store: Store) -> None:
    def grow(state: dict[str, Any]) -> dict[str, Any]:
        state["items"].append("mine")  # in place: the update is what counts, nothing else
        return {"grown": True}

    given = {"items": ["a"]}
    done = await Chain("grow", [grow], store=store).run(given, execution_id="grow")
    assert done.status == "completed"
    assert given == {"items": ["a"]}
    execution = await store.get_execution("grow")
    assert execution is not None and execution.input == {"items": ["a"]}


def test_an_identical_edge_twice_is_refused() -> None:
    chain = Chain("twice", [node("a"), node("b")])
    chain.add_edge("b", "a", max_iterations=2)
    with pytest.raises(ConfigurationError, match="already has the edge b -> a"):
        chain.add_edge("b", "a", max_iterations=2)
    chain.add_edge("b", "a", max_iterations=3)  # another bound: another edge


async def test_a_node_that_returns_nonsense_fails_the_run(store: Store) -> None:
    def bad(state: Any) -> Any:
        return 42

    done = await Chain("bad", [bad], store=store).run({}, execution_id="bad")
    assert done.status == "failed"
    assert done.error is not None
    assert "returns a dict" in done.error


def test_graph_errors_say_what_to_do() -> None:
    from tether.stores import MemoryStore

    chain = Chain("g", [node("a")], store=MemoryStore())
    with pytest.raises(ConfigurationError, match="no node"):
        chain.add_edge("a", "missing")
    with pytest.raises(ConfigurationError, match="unique"):
        chain.add_node(node("a"))


async def test_a_definition_its_journal_does_not_fit_is_refused_on_resume(store: Store) -> None:
    before = Chain("refund", [node("validate"), approve_refund], store=store)
    paused = await before.run({"amount": 50_000}, execution_id="changed")
    assert paused.status == "paused"
    after = Chain("refund", [node("validate"), node("approve"), node("charge")], store=store)  # renamed
    with pytest.raises(ConfigurationError, match=r"node 'approve_refund' \(chain:refund/node:approve_refund\)"):
        await after.resume("changed", Resume(approved=True))
    assert len(await store.list_pending(execution_id="changed")) == 1  # nothing consumed
    assert (await before.resume("changed", Resume(approved=True))).status == "completed"
