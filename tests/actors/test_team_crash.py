"""Swarms and supervisors killed with SIGKILL, or paused, and continued by other processes.

Each test runs on SQLite and Postgres under asyncio and trio. The runs file
counts every LLM call (``llm-<agent>-<turn>``) and tool run across processes.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from ._crash import Scenario, make_scenario

CHILD = Path(__file__).with_name("_team_child.py")


@pytest.fixture(params=["sqlite", "postgres"])
def scenario(request: pytest.FixtureRequest, tmp_path: Path, anyio_backend: str) -> Scenario:
    return make_scenario(CHILD, request, tmp_path, anyio_backend)


def test_interrupt_inside_a_swarm_member(scenario: Scenario) -> None:
    paused = scenario.run("swarm", "run")
    assert paused["status"] == "paused"
    assert [p["agent_path"] for p in paused["pending"]] == ["swarm:swarm/agent:analyst/tool:approve_publish"]
    done = scenario.run("swarm", "resume")
    assert done["status"] == "completed"
    assert done["output"] == "Report done."
    assert scenario.counts() == {
        "llm-researcher-1": 1, "search": 1, "llm-researcher-2": 1,
        "llm-analyst-1": 1, "approve_publish": 2, "llm-analyst-2": 1, "llm-reporter-1": 1,
    }


def test_crash_mid_handoff_continues_the_active_agents_journal(scenario: Scenario) -> None:
    scenario.kill_inside("swarm_crash", "draft:1")
    done = scenario.run("swarm_crash", "recover")
    assert done["status"] == "completed"
    # The researcher is not run again; the analyst resumes its own journal: its LLM is
    # not asked turn 1 again, only the tool the kill stopped runs again.
    assert scenario.counts() == {
        "llm-researcher-1": 1, "search": 1, "llm-researcher-2": 1,
        "llm-analyst-1": 1, "draft": 2, "llm-analyst-2": 1, "llm-reporter-1": 1,
    }


def test_crash_inside_a_worker(scenario: Scenario) -> None:
    scenario.kill_inside("supervisor_crash", "draft:1", also_recorded="reply:1")
    done = scenario.run("supervisor_crash", "recover")
    assert done["status"] == "completed"
    assert done["output"] == "Planned."
    # The supervisor's LLM is not asked turn 1 again for journaled delegations; the
    # finished worker is not run again; the killed one continues from its own journal.
    assert scenario.counts() == {
        "llm-planner-1": 1, "llm-planner-2": 1,
        "llm-researcher-1": 1, "search": 1, "llm-researcher-2": 1,
        "llm-auditor-1": 1, "draft": 2, "llm-auditor-2": 1,
    }


def test_a_worker_needing_two_approvals_pauses_twice(scenario: Scenario) -> None:
    first = scenario.run("twice", "run")
    assert first["pending_interrupt"]["reason"] == "manager_approval"
    assert first["pending_interrupt"]["agent_path"] == "supervisor:twice/worker:auditor/tool:refund_and_freeze"
    second = scenario.run("twice", "resume")
    assert second["status"] == "paused"  # fastaiagent 1.94 approves this one with the first decision
    assert second["pending_interrupt"]["reason"] == "security_approval"
    done = scenario.run("twice", "resume")
    assert done["status"] == "completed"
    assert scenario.counts()["refund_and_freeze"] == 3
    assert scenario.counts()["llm-planner-1"] == 1


def test_eight_processes_resume_a_paused_team(scenario: Scenario) -> None:
    paused = scenario.run("supervisor", "run")
    assert paused["pending_interrupt"]["agent_path"] == "supervisor:supervisor/worker:auditor/tool:approve_refund"
    procs = [subprocess.Popen(scenario.command("supervisor", "resume"), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=scenario.env) for _ in range(8)]
    outcomes: Counter[str] = Counter()
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        outcomes[json.loads(out.strip().splitlines()[-1])["status"]] += 1
    assert outcomes == {"completed": 1, "already_resumed": 7}
    counts = scenario.counts()
    assert counts["approve_refund"] == 2
    assert counts["llm-planner-1"] == 1 and counts["llm-planner-2"] == 1
