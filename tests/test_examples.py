"""The example programs run, as a user would run them, against a real store."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from tether.stores import NewEntry, NewExecution, NewInterrupt, SQLiteStore

from tests._postgres import admin_sql, with_database

EXAMPLES = Path(__file__).parent.parent / "examples"
PATH = "supervisor:planner/worker:auditor/tool:approve_refund"


async def pause_one(db: Path) -> None:
    async with SQLiteStore(db) as store:
        started = await store.start_execution(
            NewExecution(execution_id="job-42", runner="planner", root_path="supervisor:planner"),
            owner="app", lease_seconds=60,
        )
        assert started.lease is not None
        await store.suspend(started.lease, [NewEntry(path=PATH, label="turn:2/tool:approve_refund",
                                                     kind="suspended")],
                            NewInterrupt(path=PATH, reason="manager_approval", context={"amount": 50_000}))
        await store.release_lease(started.lease, status="paused")


def inbox(db: Path, backend: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / "approvals_inbox.py"), "--store", f"sqlite:///{db}",
         "--backend", backend, *args],
        capture_output=True, text=True, timeout=60, check=False,
    )


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_approvals_inbox(tmp_path: Path, backend: str) -> None:
    db = tmp_path / "app.db"
    anyio.run(pause_one, db)
    listing = inbox(db, backend)
    assert listing.returncode == 0, listing.stderr
    assert PATH in listing.stdout and "manager_approval" in listing.stdout and "50000" in listing.stdout

    approved = inbox(db, backend, "--approve", "job-42", "--path", PATH, "--by", "alice")
    assert approved.returncode == 0, approved.stderr
    assert "approved job-42" in approved.stdout

    late = inbox(db, backend, "--reject", "job-42", "--path", PATH, "--by", "bob")
    assert late.returncode == 2
    assert "already resumed" in late.stdout
    assert "Nothing is waiting" in inbox(db, backend).stdout


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_ledger_actor_survives_sigkill(kind: str, backend: str, tmp_path: Path,
                                       request: pytest.FixtureRequest) -> None:
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'ledger.db'}"
    else:
        # The example keeps its tables in the default schema: give it a database of its own.
        dsn = request.getfixturevalue("postgres_dsn")
        name = f"ledger_{request.getfixturevalue('pg_schema')}"
        admin_sql(dsn, f'CREATE DATABASE "{name}"')
        url = with_database(dsn, name)
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "ledger_actor.py"), "demo", "--store", url, "--backend", backend],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every acknowledged deposit survived, none twice" in done.stdout
    if kind == "postgres":
        admin_sql(dsn, f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_refund_chain_pauses_then_completes_in_another_process(tmp_path: Path, backend: str) -> None:
    def example(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(EXAMPLES / "refund_chain.py"), "--store", f"sqlite:///{tmp_path / 'r.db'}",
             "--backend", backend, *args],
            capture_output=True, text=True, timeout=60, check=False,
        )

    first = example()
    assert first.returncode == 0, first.stderr
    assert "paused at chain:refund/node:approve_refund" in first.stdout
    assert first.stdout.count("paging a manager") == 1
    approved = example("--approve")
    assert approved.returncode == 0, approved.stderr
    assert '"charged": 50000' in approved.stdout
    assert "paging a manager" not in approved.stdout  # the node ran again; the page did not
    late = example("--reject")
    assert late.returncode == 2
    assert "Already decided" in late.stdout


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_refund_agent_pauses_then_completes_in_another_process(tmp_path: Path, backend: str) -> None:
    def example(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(EXAMPLES / "refund_agent.py"), "--store", f"sqlite:///{tmp_path / 'a.db'}",
             "--backend", backend, *args],
            capture_output=True, text=True, timeout=60, check=False,
        )

    first = example()
    assert first.returncode == 0, first.stderr
    assert "paused at agent:refund-bot/tool:approve_refund" in first.stdout
    assert first.stdout.count("paging a manager") == 1
    approved = example("--approve")
    assert approved.returncode == 0, approved.stderr
    assert "completed: Refund processed: refund of $50,000 sent." in approved.stdout
    assert "paging a manager" not in approved.stdout  # the tool ran again; the page did not
    assert approved.stdout.count("refunding $50,000") == 1
    late = example("--reject")
    assert late.returncode == 2
    assert "Already decided" in late.stdout


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize(("name", "paused_at", "done"), [
    ("content_swarm.py", "swarm:content_team/agent:analyst/tool:approve_publish",
     "completed: Report: tide energy, three sources, cleared by the editor."),
    ("planner_supervisor.py", "supervisor:planner/worker:auditor/tool:approve_refund",
     "completed: Order R-7 ($42,000, ACME) was looked up and its refund handled."),
])
def test_teams_pause_then_complete_in_another_process(tmp_path: Path, backend: str, name: str, paused_at: str,
                                                      done: str) -> None:
    def example(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(EXAMPLES / name), "--store", f"sqlite:///{tmp_path / 't.db'}",
             "--backend", backend, *args],
            capture_output=True, text=True, timeout=60, check=False,
        )

    first = example()
    assert first.returncode == 0, first.stderr
    assert f"paused at {paused_at}" in first.stdout
    approved = example("--approve")
    assert approved.returncode == 0, approved.stderr
    assert done in approved.stdout
    late = example("--reject")
    assert late.returncode == 2
    assert "Already decided" in late.stdout


def test_the_example_test_file_passes_as_a_user_would_run_it(postgres_dsn: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--tether", "-o", "tether_postgres=required", "-p", "no:cacheprovider",
         "-q", str(EXAMPLES / "test_refund_chain.py")],
        capture_output=True, text=True, timeout=300, check=False, cwd=EXAMPLES,
        env={**os.environ, "TETHER_TEST_POSTGRES_DSN": postgres_dsn},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "18 passed" in done.stdout  # 3 tests x 2 backends x 3 stores, none skipped
