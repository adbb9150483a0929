"""Cancel a running chain and a running agent from a second process: the tool stops, nothing repeats."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import anyio
import pytest
from tether.runtime import cancel
from tether.runtime.ops._cli import main
from tether.stores import PostgresStore, SQLiteStore, Store

CHILD = Path(__file__).with_name("_cancel_child.py")
LEASE_SECONDS = 6.0
"""Long enough that a cancel seen only at a renewal (every 2 s) would show: the holder must be told."""


class Running:
    """A child process running one execution, blocked in its waiting step."""

    def __init__(self, url: str, backend: str, kind: str, runs: Path) -> None:
        self.runs = runs
        runs.touch()
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), url, backend, kind, "job", str(LEASE_SECONDS)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "TETHER_TEST_RUNS": str(runs)},
        )
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip() == "in wait":
                return
        raise AssertionError(f"the child ended before its wait: {self.proc.communicate()[1]}")

    def result(self) -> dict[str, object]:
        out, err = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0, err
        return json.loads(out.strip().splitlines()[-1])

    def counts(self) -> Counter[str]:
        return Counter(self.runs.read_text().split("\n"))


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'cancel.db'}"
    dsn, schema = request.getfixturevalue("postgres_dsn"), request.getfixturevalue("pg_schema")
    return f"{dsn}?schema={schema}"


def store_at(url: str) -> Store:
    if url.startswith("sqlite:///"):
        return SQLiteStore(url.removeprefix("sqlite:///"))
    dsn, _, schema = url.partition("?schema=")
    return PostgresStore(dsn, schema=schema)


@pytest.mark.parametrize("kind", ["chain", "agent"])
def test_a_running_execution_is_cancelled_from_another_process(
    url: str, kind: str, anyio_backend: str, tmp_path: Path
) -> None:
    running = Running(url, anyio_backend, kind, tmp_path / "runs.txt")

    async def cancel_it() -> tuple[str, float]:
        async with store_at(url) as store:
            asked = time.monotonic()
            result = await cancel(store, "job", reason="customer withdrew", by="test:bob")
            return result.status, time.monotonic() - asked

    status, took = anyio.run(cancel_it, backend=anyio_backend)
    assert status == "cancelled"
    child = running.result()
    assert child["status"] == "cancelled"
    assert child["error"] == "Cancelled by test:bob: customer withdrew"
    counts = running.counts()
    assert (counts["charge"], counts["waiting"], counts["wait cancelled"]) == (1, 1, 1)
    # Told by the store (Postgres NOTIFY, SQLite's data_version check), not at a renewal or the lease's end.
    assert took < LEASE_SECONDS / 3


def test_tether_cancel_stops_a_run_in_another_process(url: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    running = Running(url, "asyncio", "chain", tmp_path / "runs.txt")
    code = main(["--store", url, "cancel", "job", "--reason", "ops said so", "--json"])
    printed = json.loads(capsys.readouterr().out)
    assert (code, printed["status"]) == (0, "cancelled")
    assert running.result()["error"].endswith(": ops said so")
    assert running.counts()["wait cancelled"] == 1
