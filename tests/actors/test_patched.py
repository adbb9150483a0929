"""`patched()`: new code for calls that reach it new, the old path for calls the old code began."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from tether.actors import Agent, Chain, ScriptedLLM, ToolCall
from tether.runtime import Resume, interrupt, patched
from tether.stores import Store, UsageError

from ._crash import Scenario, make_scenario

answers: list[tuple[str, bool]] = []


def validate(state: dict[str, Any]) -> dict[str, Any]:
    return {"valid": True}


def approve_old(state: dict[str, Any]) -> dict[str, Any]:
    return {"approved": interrupt("manager_approval", {"amount": 5}).approved}


def approve_new(state: dict[str, Any]) -> dict[str, Any]:
    paged = patched("page-first")
    answers.append(("approve", paged))
    return {"approved": interrupt("manager_approval", {"amount": 5}).approved, "paged": paged}


async def charge_new(state: dict[str, Any]) -> dict[str, Any]:
    receipt = patched("receipts")  # on the loop's thread: no store call, no wait
    answers.append(("charge", receipt))
    return {"charged": True, "receipt": receipt}


def chain(store: Store, approve: Any, charge: Any = None) -> Chain:
    nodes = Chain("refund", store=store)
    nodes.add_node(validate)
    nodes.add_node(approve, "approve")
    nodes.add_edge("validate", "approve")
    if charge is not None:
        nodes.add_node(charge, "charge")
        nodes.add_edge("approve", "charge")
    return nodes


@pytest.fixture(autouse=True)
def fresh_answers() -> None:
    answers.clear()


async def test_a_new_run_takes_the_new_path_and_keeps_it_across_its_pause(store: Store) -> None:
    new = chain(store, approve_new, charge_new)
    assert (await new.run({}, execution_id="n")).status == "paused"
    result = await new.resume("n", Resume(approved=True))
    # The call paused and was answered, so it began before; the journaled True still holds.
    assert answers == [("approve", True), ("approve", True), ("charge", True)]
    assert result.output == {"valid": True, "approved": True, "paged": True, "charged": True, "receipt": True}
    journal = await store.read_journal("n")
    assert [e.payload["result"] for e in journal if e.label == "patched"] == [True, True]  # type: ignore[index]


async def test_a_call_the_old_code_paused_in_takes_the_old_path(store: Store) -> None:
    old = chain(store, approve_old)
    assert (await old.run({}, execution_id="o")).status == "paused"
    # A deploy: approve now checks patched(), and a charge node was added after it.
    result = await chain(store, approve_new, charge_new).resume("o", Resume(approved=True))
    assert answers == [("approve", False), ("charge", True)]  # charge is reached only now, on the new code
    assert result.output["paged"] is False and result.output["receipt"] is True


async def test_the_answer_is_the_same_when_the_message_is_handled_again(store: Store) -> None:
    old = chain(store, approve_old)
    assert (await old.run({}, execution_id="o")).status == "paused"
    new = chain(store, approve_new)
    assert (await new.resume("o", Resume(approved=True))).status == "completed"
    fork = await new.fork("o", at="resumed", new_execution_id="o2")  # replays approve from its decision
    assert fork.status == "completed" and fork.output["paged"] is False
    assert [answer for _, answer in answers] == [False, False]


async def test_a_check_after_a_pause_of_a_new_run_takes_the_new_path(store: Store) -> None:
    def approve_then_check(state: dict[str, Any]) -> dict[str, Any]:
        approved = interrupt("manager_approval", {"amount": 5}).approved
        answers.append(("after", patched("audit-after-approval")))  # past the pause: reached only now
        return {"approved": approved}

    new = chain(store, approve_then_check)
    assert (await new.run({}, execution_id="n")).status == "paused"
    assert (await new.resume("n", Resume(approved=True))).status == "completed"
    assert answers == [("after", True)]


async def test_a_call_paused_on_the_old_code_keeps_the_old_path_while_another_is_decided(store: Store) -> None:
    new_code = False

    def approve_refund(amount: int) -> str:
        return "ok" if interrupt("manager", {"amount": amount}).approved else "no"

    def freeze_account(account: str) -> str:
        if new_code:
            answers.append(("freeze", patched("page-security-first")))
        return "frozen" if interrupt("security", {"account": account}).approved else "open"

    def agent() -> Agent:
        llm = ScriptedLLM([[ToolCall("approve_refund", {"amount": 5}), ToolCall("freeze_account", {"account": "X"})],
                           "done"])
        return Agent("a", llm=llm, tools=[approve_refund, freeze_account], store=store)

    assert (await agent().run("go", execution_id="e")).status == "paused"  # paused in both tools, old code
    new_code = True
    await agent().resume("e", Resume(approved=True), path="agent:a/tool:approve_refund")
    result = await agent().resume("e", Resume(approved=True), path="agent:a/tool:freeze_account")
    assert result.status == "completed"
    assert answers == [("freeze", False), ("freeze", False)]  # it was paused in freeze_account all along


def test_outside_an_execution_there_is_no_old_code() -> None:
    assert patched("anything") is True
    with pytest.raises(UsageError, match="non-empty string"):
        patched("")


async def test_patched_in_a_worker_thread_of_a_step(store: Store) -> None:
    def in_thread(state: dict[str, Any]) -> dict[str, Any]:
        return {"new": anyio.from_thread.run_sync(patched, "threaded")}

    result = await Chain("t", [in_thread], store=store).run({}, execution_id="t")
    assert result.output == {"new": True}


@pytest.fixture(params=["sqlite", "postgres"])
def scenario(request: pytest.FixtureRequest, tmp_path: Path, anyio_backend: str) -> Scenario:
    return make_scenario(Path(__file__).with_name("_chain_child.py"), request, tmp_path, anyio_backend)


def checks(scenario: Scenario) -> dict[str, int]:
    """What every patched() call in the child processes answered, counted."""
    return {line: count for line, count in scenario.counts().items() if line.startswith("patched")}


def test_a_crash_between_the_check_and_the_next_boundary_gives_the_same_answer(scenario: Scenario) -> None:
    scenario.env["TETHER_TEST_CODE"] = "new"
    scenario.kill_inside("patch", "approve:1")  # killed after patched() answered, before the pause is journaled
    assert scenario.run("patch", "recover")["status"] == "paused"
    result = scenario.run("patch", "resume")
    assert result["status"] == "completed" and result["output"]["paged"] is True
    assert checks(scenario) == {"patched:True": 3}


def test_a_crash_after_a_check_that_follows_a_durable_step_gives_the_same_answer(scenario: Scenario) -> None:
    scenario.kill_inside("patch_step", "approve:1")  # its timer journaled, the answer not yet
    result = scenario.run("patch_step", "recover")
    assert result["status"] == "completed" and result["output"]["paged"] is True
    assert checks(scenario) == {"patched:True": 2}


def test_a_crash_after_the_old_path_was_chosen_keeps_the_old_path(scenario: Scenario) -> None:
    scenario.env["TETHER_TEST_CODE"] = "old"
    assert scenario.run("patch", "run")["status"] == "paused"
    scenario.env["TETHER_TEST_CODE"] = "new"
    scenario.kill_inside("patch", "approve:1", mode="resume")  # decided, then killed after the check
    result = scenario.run("patch", "recover")
    assert result["status"] == "completed" and result["output"]["paged"] is False
    assert checks(scenario) == {"patched:False": 2}
