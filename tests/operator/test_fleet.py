"""`tether worker` processes on a real Postgres: decisions recorded elsewhere, SIGKILL, SIGSTOP,
timers and deadlines across a full restart.

Conditions here live in other processes' commits. A trigger of the test's own
notifies whenever an execution's status or lease owner changes, and the test
looks at the store again on each notification, always against a deadline. Side effects are rows keyed by `idempotency_key()` in
a SQLite file every process writes to, so "nothing ran twice" is counted.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import anyio
import asyncpg
import pytest
from tether.stores import Execution, StoreError, open_store

from tests._postgres import restartable_server

from ._fleet_app import approvals, batch, deadlines, prepare, timers

APP = "tests.operator._fleet_app:runners"
CHANGED = "fleet_changed"
WATCH = f"""
CREATE OR REPLACE FUNCTION {CHANGED}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_notify('{CHANGED}', ''); RETURN NULL; END $$;
DROP TRIGGER IF EXISTS {CHANGED} ON tether_executions;
CREATE TRIGGER {CHANGED} AFTER INSERT OR UPDATE OF status, lease_owner ON tether_executions
    FOR EACH STATEMENT EXECUTE FUNCTION {CHANGED}();
"""
ROOT = Path(__file__).resolve().parents[2]


class Fleet:
    """Worker processes on one store, and what they did."""

    def __init__(self, url: str, effects: Path, backend: str, app: str = APP) -> None:
        self.url, self.effects, self.backend, self.app = url, effects, backend, app
        self.env = {**os.environ, "TETHER_FLEET_EFFECTS": str(effects)}
        self.workers: list[subprocess.Popen[str]] = []
        prepare(str(effects))

    def start_worker(self, concurrency: int = 4, **env: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tether.runtime.ops", "--store", self.url, "--backend", self.backend,
             "worker", "--app", self.app, "--lease-seconds", "1", "--poll-interval", "0.2",
             "--concurrency", str(concurrency), "--grace", "10"],
            env={**self.env, **env}, cwd=ROOT, stderr=subprocess.DEVNULL, text=True,
        )
        self.workers.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen[str]) -> int:
        proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout=60)

    def store(self, job: Callable[[Any], Any]) -> Any:
        async def main() -> Any:
            async with open_store(self.url) as store:
                for runner in (approvals, batch, timers, deadlines):
                    runner.store = store
                return await job(store)

        return anyio.run(main)

    def executions(self) -> list[Execution]:
        return self.store(lambda store: store.list_executions(limit=10_000))  # type: ignore[no-any-return]

    async def _connect(self) -> asyncpg.Connection:
        """A plain asyncpg connection to the fleet's schema."""
        parts = urlsplit(self.url)
        query = parse_qs(parts.query)
        schema = query.pop("schema", [None])[-1]
        dsn = urlunsplit(parts._replace(query=urlencode(query, doseq=True)))
        return await asyncpg.connect(dsn, server_settings={"search_path": schema} if schema else {})

    def watch(self) -> None:
        """Create the store's tables and the test's trigger, before any worker runs.

        Once only: DDL waits for every lock on the table, and a worker frozen between
        two protocol messages (SIGSTOP) holds one until it runs again; every session
        would then queue behind the DDL.
        """
        self.store(lambda store: store.count_pending())

        async def main() -> None:
            conn = await self._connect()
            try:
                await conn.execute(WATCH)
            finally:
                await conn.close()

        anyio.run(main)

    def wait(self, condition: Callable[[list[Execution]], bool], what: str, timeout: float = 120) -> list[Execution]:
        """Look at the executions each time one changes, until ``condition`` holds."""

        async def main() -> list[Execution]:
            changed = [anyio.Event()]
            listener = await self._connect()
            rows: list[Execution] = []
            try:
                await listener.add_listener(CHANGED, lambda *_: changed[-1].set())
                async with open_store(self.url) as store:
                    with anyio.move_on_after(timeout):
                        while True:
                            changed.append(anyio.Event())  # before the read: a change during it wakes us
                            try:
                                rows = await store.list_executions(limit=10_000)
                            except StoreError:
                                pass  # the server is restarting: look again
                            else:
                                if condition(rows):
                                    return rows
                            # A restarted server drops the listener: look again anyway, now and then.
                            with anyio.move_on_after(1):
                                await changed[-1].wait()
            finally:
                with contextlib.suppress(Exception):
                    await listener.close(timeout=5)
            raise AssertionError(f"timed out waiting for {what}: {Counter(e.status for e in rows)}")

        return anyio.run(main)

    def effects_by_execution(self) -> Counter[str]:
        with sqlite3.connect(self.effects) as db:
            return Counter(row[0] for row in db.execute("SELECT execution FROM effects"))

    def effect_pids(self) -> set[int]:
        with sqlite3.connect(self.effects) as db:
            return {row[0] for row in db.execute("SELECT DISTINCT pid FROM effects")}


F = TypeVar("F", bound=Fleet)


@contextlib.contextmanager
def watched(fleet: F) -> Iterator[F]:
    """``fleet`` with the test's trigger in place, and every worker it started killed at the end."""
    fleet.watch()
    try:
        yield fleet
    finally:
        for proc in fleet.workers:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)


@pytest.fixture(params=["asyncio", "trio"])
def fleet(request: pytest.FixtureRequest, postgres_dsn: str, pg_schema: str, tmp_path: Path) -> Iterator[Fleet]:
    with watched(Fleet(f"{postgres_dsn}?schema={pg_schema}", tmp_path / "effects.db", request.param)) as running:
        yield running


def held_by(proc: subprocess.Popen[str]) -> Callable[[list[Execution]], bool]:
    return lambda rows: any(e.lease_owner and f":{proc.pid}:" in e.lease_owner for e in rows)


def test_three_workers_carry_out_decisions_recorded_elsewhere(fleet: Fleet) -> None:
    ids = [f"a-{n:03d}" for n in range(200)]

    async def enqueue(store: Any) -> None:
        for execution_id in ids:
            await approvals.start({"order": execution_id}, execution_id=execution_id)

    fleet.store(enqueue)
    workers = [fleet.start_worker() for _ in range(3)]
    fleet.wait(lambda rows: sum(e.status == "paused" for e in rows) == 200, "200 paused runs")
    decider = subprocess.run([sys.executable, "-m", "tests.operator._fleet_decider", fleet.url, *ids],
                             cwd=ROOT, env=fleet.env, capture_output=True, text=True, timeout=300, check=False)
    assert decider.returncode == 0, decider.stderr
    rows = fleet.wait(lambda rows: all(e.status == "completed" for e in rows), "200 completed runs")
    assert len(rows) == 200
    assert fleet.effects_by_execution() == dict.fromkeys(ids, 1)  # every side effect exactly once
    assert len(fleet.effect_pids()) >= 2  # the work spread over the workers

    async def decisions(store: Any) -> Counter[str]:
        counts: Counter[str] = Counter()
        for execution_id in ids:
            counts[execution_id] = sum(e.kind == "resumed" for e in await store.read_journal(execution_id))
        return counts

    assert set(fleet.store(decisions).values()) == {1}  # no pending row was claimed twice
    assert [fleet.stop(proc) for proc in workers] == [0, 0, 0]  # SIGTERM: a clean exit


def test_sigkill_one_of_three_workers(fleet: Fleet) -> None:
    ids = [f"b-{n:02d}" for n in range(24)]

    async def enqueue(store: Any) -> None:
        for execution_id in ids:
            await batch.start({"order": execution_id, "work": 1.0}, execution_id=execution_id)

    fleet.store(enqueue)
    victim = fleet.start_worker()
    fleet.wait(held_by(victim), "the first worker to hold executions")
    survivors = [fleet.start_worker(), fleet.start_worker()]
    victim.kill()
    victim.wait(timeout=30)
    fleet.wait(lambda rows: all(e.status == "completed" for e in rows), "every run completed by the others")
    assert fleet.effects_by_execution() == dict.fromkeys(ids, 1)
    assert [fleet.stop(proc) for proc in survivors] == [0, 0]


def test_a_frozen_worker_is_fenced_out(fleet: Fleet) -> None:
    async def enqueue(store: Any) -> None:
        await batch.start({"order": "s-1", "work": 2.0}, execution_id="s-1")

    fleet.store(enqueue)
    frozen = fleet.start_worker()
    fleet.wait(held_by(frozen), "the first worker to hold the run")
    frozen.send_signal(signal.SIGSTOP)  # frozen past its lease
    other = fleet.start_worker()
    [done] = fleet.wait(lambda rows: rows[0].status == "completed", "the other worker to finish it")
    frozen.send_signal(signal.SIGCONT)  # its stale writes are refused; it lets go
    assert done.result is not None
    assert done.result["charged_by"] == other.pid  # type: ignore[index, call-overload]
    assert fleet.effects_by_execution() == {"s-1": 1}
    assert fleet.stop(frozen) == 0  # still healthy
    assert fleet.stop(other) == 0
    [after] = fleet.executions()
    assert after.result == done.result  # the frozen worker changed nothing


def test_timers_and_deadlines_across_a_full_restart(fleet: Fleet) -> None:
    async def enqueue(store: Any) -> None:
        await timers.start({"order": "t-1", "nap": 2.0}, execution_id="t-1")
        await deadlines.start({"order": "t-2", "timeout": 2.0}, execution_id="t-2")

    fleet.store(enqueue)
    first = fleet.start_worker()
    rows = fleet.wait(lambda rows: all(e.status == "paused" for e in rows), "a parked timer and a pending approval")
    assert fleet.stop(first) == 0  # no process runs from here on
    due = max(e.wake_at or datetime.now(UTC) for e in rows)
    pending = fleet.store(lambda store: store.list_pending())
    due = max(due, *(p.deadline for p in pending))
    time.sleep(max(0.0, (due - datetime.now(UTC)).total_seconds()))  # both moments pass while nothing runs
    fleet.start_worker()
    rows = fleet.wait(lambda rows: all(e.status == "completed" for e in rows), "both to complete after the restart")
    by_id = {e.execution_id: e for e in rows}
    assert by_id["t-1"].result == {"order": "t-1", "nap": 2.0, "rested": True, "charged_by": by_id["t-1"].result["charged_by"]}  # type: ignore[index, call-overload]
    assert by_id["t-2"].result["approved"] is False  # type: ignore[index, call-overload]

    async def decision(store: Any) -> Any:
        return [e.payload for e in await store.read_journal("t-2") if e.kind == "resumed"]

    [payload] = fleet.store(decision)
    assert payload["by"] == "deadline"


@pytest.fixture
def private_postgres() -> Iterator[tuple[str, Callable[[float], None]]]:
    """A Postgres server of this test's own, and a function that restarts it after a time down."""
    with restartable_server() as server:
        yield server


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_postgres_stopped_past_the_lease_under_the_workers(private_postgres: tuple[str, Callable[[float], None]],
                                                           backend: str,
                                              tmp_path: Path) -> None:
    url, restart = private_postgres
    fleet = Fleet(url, tmp_path / "effects.db", backend)
    fleet.watch()
    ids = [f"r-{n:02d}" for n in range(16)]
    try:
        async def enqueue(store: Any) -> None:
            for execution_id in ids:
                await batch.start({"order": execution_id, "work": 0.3}, execution_id=execution_id)

        fleet.store(enqueue)
        workers = [fleet.start_worker(concurrency=2) for _ in range(2)]
        fleet.wait(lambda rows: sum(e.status == "completed" for e in rows) >= 3, "a few runs done before the restart")
        restart(3.0)  # under running executions, down for three of the workers' 1 s leases
        fleet.wait(lambda rows: all(e.status == "completed" for e in rows), "every run completed after it")
        assert fleet.effects_by_execution() == dict.fromkeys(ids, 1)
        assert [fleet.stop(proc) for proc in workers] == [0, 0]
    finally:
        for proc in fleet.workers:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
