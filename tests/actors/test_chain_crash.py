"""Chains killed with SIGKILL inside a node, recovered by another process (the seed's failures)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest
from tether.stores import PostgresStore, SQLiteStore

CHILD = Path(__file__).with_name("_chain_child.py")


class Scenario:
    def __init__(self, url: str, backend: str, extra: list[str], runs: Path, store: Any) -> None:
        self.url, self.backend, self.extra, self.runs, self.make_store = url, backend, extra, runs, store
        runs.touch()
        self.env = {**os.environ, "TETHER_TEST_RUNS": str(runs)}

    def command(self, scenario: str, mode: str) -> list[str]:
        return [sys.executable, str(CHILD), self.url, self.backend, scenario, mode, scenario, *self.extra]

    def run(self, scenario: str, mode: str) -> Any:
        done = subprocess.run(self.command(scenario, mode), capture_output=True, text=True, timeout=120,
                              check=False, env=self.env)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    def kill_inside(self, scenario: str, block: str, also_recorded: str | None = None) -> None:
        env = {**self.env, "TETHER_TEST_BLOCK": block}
        with subprocess.Popen(self.command(scenario, "run"), stdout=subprocess.PIPE, text=True, env=env) as proc:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == f"in {block.split(':')[0]}"
            if also_recorded:
                self.wait_for_record(scenario, also_recorded)
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL

    def wait_for_record(self, execution_id: str, label: str) -> None:
        async def recorded() -> bool:
            async with self.make_store() as store:
                return any(e.label == label for e in await store.read_journal(execution_id))

        # The condition lives in another process's commit: no event crosses that boundary,
        # so poll the store, bounded by a deadline.
        deadline = time.monotonic() + 30
        while not anyio.run(recorded):
            assert time.monotonic() < deadline, f"{label} was never recorded"
            time.sleep(0.02)

    def counts(self) -> Counter[str]:
        return Counter(self.runs.read_text().split())


@pytest.fixture(params=["sqlite", "postgres"])
def scenario(request: pytest.FixtureRequest, tmp_path: Path, anyio_backend: str) -> Scenario:
    if request.param == "sqlite":
        db = tmp_path / "chain.db"
        return Scenario(f"sqlite:///{db}", anyio_backend, [], tmp_path / "runs.txt", lambda: SQLiteStore(db))
    dsn, schema = request.getfixturevalue("postgres_dsn"), request.getfixturevalue("pg_schema")
    return Scenario(dsn, anyio_backend, [schema], tmp_path / "runs.txt",
                    lambda: PostgresStore(dsn, schema=schema))


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
