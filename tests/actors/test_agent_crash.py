"""Agents killed with SIGKILL mid-run, continued by another process: the three resume shapes.

Each test runs on SQLite and Postgres under asyncio and trio. ``llm_calls`` is
what the continuing process asked its LLM; the runs file counts across processes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ._crash import Scenario, make_scenario

CHILD = Path(__file__).with_name("_agent_child.py")


@pytest.fixture(params=["sqlite", "postgres"])
def scenario(request: pytest.FixtureRequest, tmp_path: Path, anyio_backend: str) -> Scenario:
    return make_scenario(CHILD, request, tmp_path, anyio_backend)


def test_interrupted_run_resumed_in_another_process(scenario: Scenario) -> None:
    paused = scenario.run("approval", "run")
    assert paused["status"] == "paused"
    assert paused["pending_interrupt"]["agent_path"] == "agent:approval/tool:approve_refund"
    done = scenario.run("approval", "resume")
    assert done["status"] == "completed"
    assert done["output"] == "Refund processed."
    assert done["llm_calls"] == 1  # turn 2 only: turn 1's reply was journaled
    # The suspended tool ran again with the decision; its @idempotent page went out once.
    assert scenario.counts() == {"llm1": 1, "approve_refund": 2, "page": 1, "llm2": 1}
    assert scenario.run("approval", "resume")["status"] == "already_resumed"


def test_tool_boundary_crash(scenario: Scenario) -> None:
    scenario.kill_inside("tool", "refunded:1")
    done = scenario.run("tool", "recover")
    assert done["status"] == "completed"
    assert done["output"] == "Refunded."
    assert done["llm_calls"] == 1  # the tool call was journaled: the LLM is not asked turn 1 again
    # The tool ran again with the saved arguments; the @idempotent charge fired once.
    assert scenario.counts() == {"llm1": 1, "refund": 2, "refund-args-A1-70": 2, "charge": 1,
                                 "refunded": 2, "llm2": 1}


def test_turn_boundary_crash(scenario: Scenario) -> None:
    scenario.kill_inside("turn", "llm2:1")
    done = scenario.run("turn", "recover")
    assert done["status"] == "completed"
    assert done["output"] == "Found it."
    assert done["llm_calls"] == 1  # turn 2, re-issued; turn 1 and its tool are not
    assert scenario.counts() == {"llm1": 1, "lookupA": 1, "llm2": 2}


def test_parallel_calls_killed_while_one_runs(scenario: Scenario) -> None:
    scenario.kill_inside("parallel", "slow:1", also_recorded=("turn:1/tool:lookup[0]", "turn:1/tool:lookup[2]"))
    done = scenario.run("parallel", "recover")
    assert done["status"] == "completed"
    assert done["llm_calls"] == 1
    # The calls that finished were kept; only the one the kill stopped ran again.
    assert scenario.counts() == {"llm1": 1, "lookupA": 1, "lookupB": 1, "slow": 2, "llm2": 1}
