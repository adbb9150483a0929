"""Chains killed with SIGKILL inside a node, recovered by another process (where fastaiagent 1.94 fails)."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from ._crash import Scenario, make_scenario

CHILD = Path(__file__).with_name("_chain_child.py")


@pytest.fixture(params=["sqlite", "sqlite-normal", "postgres"])
def scenario(request: pytest.FixtureRequest, tmp_path: Path, anyio_backend: str) -> Scenario:
    return make_scenario(CHILD, request, tmp_path, anyio_backend)


def test_line_killed_in_node_3(scenario: Scenario) -> None:
    scenario.kill_inside("line", "n3:1")
    result = scenario.run("line", "recover")
    assert result["status"] == "completed"
    assert scenario.counts() == {"n1": 1, "n2": 1, "n3": 2, "n4": 1, "n5": 1}


def test_fan_out_killed_in_b_after_c_finished(scenario: Scenario) -> None:
    scenario.kill_inside("fanout", "b:1", also_recorded="node:c")
    result = scenario.run("fanout", "recover")
    assert result["status"] == "completed"
    assert scenario.counts() == {"a": 1, "b": 2, "c": 1, "d": 1}
    assert all(result["output"][n] for n in "abcd")


def test_conditional_killed_in_d(scenario: Scenario) -> None:
    scenario.kill_inside("route", "d:1")
    result = scenario.run("route", "recover")
    assert result["status"] == "completed"
    assert scenario.counts() == {"a": 1, "b": 1, "d": 2}  # c never runs
    assert "c" not in result["output"]


def test_cycle_killed_on_its_third_pass(scenario: Scenario) -> None:
    scenario.kill_inside("cycle", "n1:3")
    result = scenario.run("cycle", "recover")
    assert result["status"] == "completed"
    # As without the crash: four passes each, the killed pass counted twice as a run...
    assert scenario.counts() == {"n1": 5, "n2": 4}
    # ... and once in the state, which only journaled updates built.
    assert result["output"]["counts"] == {"n1": 4, "n2": 4}


def test_eight_processes_resume_a_paused_chain(scenario: Scenario) -> None:
    paused = scenario.run("approval", "run")
    assert paused["status"] == "paused"
    assert paused["pending_interrupt"]["agent_path"] == "chain:approval/node:approve"
    procs = [subprocess.Popen(scenario.command("approval", "resume"), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=scenario.env) for _ in range(8)]
    outcomes = Counter()
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        outcomes[json.loads(out.strip().splitlines()[-1])["status"]] += 1
    assert outcomes == {"completed": 1, "already_resumed": 7}
    assert scenario.counts() == {"validate": 1, "charge": 1}
