"""Executions across real processes: pause here, resume there, and SIGKILL in between."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

CHILD = Path(__file__).with_name("_execution_child.py")
PATH = "supervisor:planner/worker:auditor/tool:approve_refund"


class Execution:
    """Runs the child script against one store, one backend and one execution id."""

    def __init__(self, url: str, backend: str, extra: list[str], effects: Path) -> None:
        self.url, self.backend, self.extra = url, backend, extra
        self.env = {**os.environ, "TETHER_TEST_EFFECTS": str(effects)}
        self.effects = effects

    def command(self, mode: str) -> list[str]:
        return [sys.executable, str(CHILD), self.url, self.backend, mode, "job", *self.extra]

    def run(self, mode: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.command(mode), capture_output=True, text=True, timeout=120,
                              check=False, env={**self.env, **env})

    def start(self, mode: str, **env: str) -> subprocess.Popen[str]:
        return subprocess.Popen(self.command(mode), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env={**self.env, **env})

    def charges(self) -> list[str]:
        return self.effects.read_text().splitlines() if self.effects.exists() else []


def last_json(output: str) -> Any:
    return json.loads(output.strip().splitlines()[-1])


@pytest.fixture(params=["sqlite", "postgres"])
def execution(request: pytest.FixtureRequest, tmp_path: Path, anyio_backend: str) -> Execution:
    if request.param == "sqlite":
        url, extra = f"sqlite:///{tmp_path / 'job.db'}", []
    else:
        url, extra = request.getfixturevalue("postgres_dsn"), [request.getfixturevalue("pg_schema")]
    return Execution(url, anyio_backend, extra, tmp_path / "effects.txt")


def test_pause_here_resume_there_and_the_second_resumer_is_refused(execution: Execution) -> None:
    paused = execution.run("run")
    assert paused.returncode == 0, paused.stderr
    result = last_json(paused.stdout)
    assert result["status"] == "paused"
    assert result["pending_interrupt"]["agent_path"] == PATH

    resumers = [execution.start("resume") for _ in range(2)]
    outcomes = []
    for proc in resumers:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        outcomes.append(last_json(out)["status"])
    assert sorted(outcomes) == ["already_resumed", "completed"]
    assert execution.charges() == ["charge 50000"]


def test_a_resumer_killed_right_after_its_claim(execution: Execution) -> None:
    assert last_json(execution.run("run").stdout)["status"] == "paused"
    killed = execution.run("resume", TETHER_FAULTS="after_claim")
    assert killed.returncode == -signal.SIGKILL
    # The decision was journaled by the claim itself: recovery carries it out.
    recovered = execution.run("recover")
    assert recovered.returncode == 0, recovered.stderr
    result = last_json(recovered.stdout)
    assert result["status"] == "completed"
    assert result["output"] == {"receipt": "charged 50000", "approved": True}
    assert execution.charges() == ["charge 50000"]


def test_sigkill_mid_run_then_two_recoverers_at_once(execution: Execution) -> None:
    with execution.start("run-stuck") as doomed:
        assert doomed.stdout is not None
        assert doomed.stdout.readline().strip() == "stuck"
        doomed.send_signal(signal.SIGKILL)
        doomed.communicate(timeout=30)
    assert doomed.returncode == -signal.SIGKILL
    recoverers = [execution.start("recover", TETHER_TEST_RECOVERING="1") for _ in range(2)]
    statuses = []
    for proc in recoverers:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        statuses.append(last_json(out))
    # One of them ran it; the other found it running (lease held) or already done.
    assert all(s["status"] in ("completed", "lease_held") for s in statuses)
    done = [s for s in statuses if s["status"] == "completed"]
    assert done
    assert all(s["output"] == {"receipt": "charged 700", "approved": True} for s in done)
    # The side effect before the crash ran once, across the three processes.
    assert execution.charges() == ["charge 700"]
