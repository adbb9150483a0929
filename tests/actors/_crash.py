"""Run a runner's child process per scenario, kill it inside a step, and count what ran.

A child script takes ``STORE_URL BACKEND SCENARIO MODE EXECUTION_ID [SCHEMA]``,
prints ``in <step>`` when it reaches the step named by ``TETHER_TEST_BLOCK``
(``<step>:<visit>``) and blocks there, appends every run of every step to the
file ``TETHER_TEST_RUNS`` (outside the store), and prints its result as JSON.
"""

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


class Scenario:
    def __init__(self, child: Path, url: str, backend: str, extra: list[str], runs: Path, store: Any) -> None:
        self.child = child
        self.url, self.backend, self.extra, self.runs, self.make_store = url, backend, extra, runs, store
        runs.touch()
        self.env = {**os.environ, "TETHER_TEST_RUNS": str(runs)}

    def command(self, scenario: str, mode: str) -> list[str]:
        return [sys.executable, str(self.child), self.url, self.backend, scenario, mode, scenario, *self.extra]

    def run(self, scenario: str, mode: str) -> Any:
        done = subprocess.run(self.command(scenario, mode), capture_output=True, text=True, timeout=120,
                              check=False, env=self.env)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    def kill_inside(self, scenario: str, block: str, also_recorded: str | tuple[str, ...] = ()) -> None:
        env = {**self.env, "TETHER_TEST_BLOCK": block}
        with subprocess.Popen(self.command(scenario, "run"), stdout=subprocess.PIPE, text=True, env=env) as proc:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == f"in {block.split(':')[0]}"
            for label in (also_recorded,) if isinstance(also_recorded, str) else also_recorded:
                self.wait_for_record(scenario, label)
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


def make_scenario(child: Path, request: pytest.FixtureRequest, tmp_path: Path, backend: str) -> Scenario:
    """A scenario on the store ``request.param`` names (``sqlite`` or ``postgres``)."""
    if request.param == "sqlite":
        db = tmp_path / "runner.db"
        return Scenario(child, f"sqlite:///{db}", backend, [], tmp_path / "runs.txt", lambda: SQLiteStore(db))
    dsn, schema = request.getfixturevalue("postgres_dsn"), request.getfixturevalue("pg_schema")
    return Scenario(child, dsn, backend, [schema], tmp_path / "runs.txt",
                    lambda: PostgresStore(dsn, schema=schema))


