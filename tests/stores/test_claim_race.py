"""Eight OS processes claim the same pending interrupt at once, twenty times.

fastaiagent 1.94 loses this race on SQLite with "database is locked" in most
trials (a deferred read-then-write transaction). Here every trial must have
exactly one winner and seven AlreadyResumed, on SQLite and on Postgres.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import anyio
import pytest
from tether.stores import NewEntry, NewExecution, NewInterrupt, PostgresStore, SQLiteStore, Store

CLAIMERS = 8
TRIALS = 20
PATH = "chain:c/node:approve"


async def pause_executions(store: Store, count: int) -> list[str]:
    ids = []
    async with store:
        for i in range(count):
            started = await store.start_execution(
                NewExecution(execution_id=f"race-{i}", runner="c", root_path="chain:c"),
                owner="parent", lease_seconds=60,
            )
            assert started.lease is not None
            await store.suspend(started.lease, [NewEntry(path=PATH, label="node:approve", kind="suspended")],
                                NewInterrupt(path=PATH, reason="approval"))
            await store.release_lease(started.lease, status="paused")
            ids.append(started.execution.execution_id)
    return ids


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_eight_processes_claim_once(kind: str, backend: str, tmp_path: Path,
                                    request: pytest.FixtureRequest) -> None:
    if kind == "sqlite":
        db = tmp_path / "race.db"
        url, args = f"sqlite:///{db}", []
        store: Store = SQLiteStore(db)
    else:
        url = request.getfixturevalue("postgres_dsn")
        schema = request.getfixturevalue("pg_schema")
        args, store = [schema], PostgresStore(url, schema=schema)
    ids = anyio.run(pause_executions, store, TRIALS)

    script = Path(__file__).with_name("_claimer.py")
    with contextlib.ExitStack() as stack:
        procs = [
            stack.enter_context(subprocess.Popen(
                [sys.executable, str(script), url, backend, *args],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            ))
            for _ in range(CLAIMERS)
        ]
        run_trials(procs, ids)
    assert all(proc.returncode == 0 for proc in procs)


def run_trials(procs: list[subprocess.Popen[str]], ids: list[str]) -> None:
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        for execution_id in ids:
            # Every claimer is already connected and blocked on its pipe, so the
            # eight claims start within microseconds of each other.
            for proc in procs:
                assert proc.stdin is not None
                proc.stdin.write(execution_id + "\n")
                proc.stdin.flush()
            outcomes = Counter(json.loads(proc.stdout.readline())["outcome"]  # type: ignore[union-attr]
                               for proc in procs)
            assert outcomes == {"won": 1, "already_resumed": CLAIMERS - 1}, (execution_id, outcomes)
    finally:
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.close()
        for proc in procs:
            proc.wait(timeout=30)
