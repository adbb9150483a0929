"""Run a runner's child process per scenario, kill it inside a step, and count what ran.

A child script takes ``STORE_URL BACKEND SCENARIO MODE EXECUTION_ID [SCHEMA]``,
prints ``in <step>`` when it reaches the step named by ``TETHER_TEST_BLOCK``
(``<step>:<visit>``) and blocks there, appends every run of every step to the
file ``TETHER_TEST_RUNS`` (outside the store), announces each journal write it
commits (``recorded <label>``), and prints its result as JSON (see _child.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from tether.stores import PostgresStore, Store, open_store


class Scenario:
    def __init__(self, child: Path, url: str, backend: str, extra: list[str], runs: Path) -> None:
        self.child = child
        self.url, self.backend, self.extra, self.runs = url, backend, extra, runs
        runs.touch()
        self.env = {**os.environ, "TETHER_TEST_RUNS": str(runs)}

    def command(self, scenario: str, mode: str) -> list[str]:
        return [sys.executable, str(self.child), self.url, self.backend, scenario, mode, scenario, *self.extra]

    def run(self, scenario: str, mode: str) -> Any:
        done = subprocess.run(self.command(scenario, mode), capture_output=True, text=True, timeout=120,
                              check=False, env=self.env)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    def kill_inside(self, scenario: str, block: str, also_recorded: str | tuple[str, ...] = (),
                    mode: str = "run") -> None:
        """Run, and SIGKILL the child once it blocks in ``block`` and has journaled ``also_recorded``.

        The child says both on its stdout (see _child.py): the wait is on the pipe.
        """
        env = {**self.env, "TETHER_TEST_BLOCK": block}
        labels = (also_recorded,) if isinstance(also_recorded, str) else also_recorded
        awaited = {f"in {block.split(':')[0]}", *(f"recorded {label}" for label in labels)}
        with subprocess.Popen(self.command(scenario, mode), stdout=subprocess.PIPE, text=True, env=env) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                awaited.discard(line.strip())
                if not awaited:
                    break
            assert not awaited, f"the child ended before {awaited}"
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL

    def counts(self) -> Counter[str]:
        return Counter(self.runs.read_text().split())

    def die_at(self, scenario: str, point: str, mode: str = "run") -> None:
        """Run with the fault hook armed at ``point`` (``TETHER_FAULTS``): the child kills itself there."""
        done = subprocess.run(self.command(scenario, mode), capture_output=True, text=True, timeout=120,
                              check=False, env={**self.env, "TETHER_FAULTS": point})
        assert done.returncode == -signal.SIGKILL, done.stdout + done.stderr

    def store(self) -> Store:
        """The scenario's store, as the parent opens it (not opened yet)."""
        return PostgresStore(self.url, schema=self.extra[0]) if self.extra else open_store(self.url)


def make_scenario(child: Path, request: pytest.FixtureRequest, tmp_path: Path, backend: str) -> Scenario:
    """A scenario on the store ``request.param`` names (``sqlite``, ``sqlite-normal`` or ``postgres``)."""
    if request.param in ("sqlite", "sqlite-normal"):
        db = tmp_path / "runner.db"
        # At NORMAL, uncontended commits are made on the event loop's thread.
        query = "?synchronous=NORMAL" if request.param == "sqlite-normal" else ""
        return Scenario(child, f"sqlite:///{db}{query}", backend, [], tmp_path / "runs.txt")
    dsn, schema = request.getfixturevalue("postgres_dsn"), request.getfixturevalue("pg_schema")
    return Scenario(child, dsn, backend, [schema], tmp_path / "runs.txt")


