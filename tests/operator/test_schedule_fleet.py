"""A schedule served by three `tether worker` processes on Postgres, one killed at the tick: one execution per tick."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tether.runtime._executions.schedules import due

from ._schedule_app import every_minute, ticks
from .test_fleet import Fleet, watched

APP = "tests.operator._schedule_app:runners"


@pytest.fixture(params=["asyncio", "trio"])
def fleet(request: pytest.FixtureRequest, postgres_dsn: str, pg_schema: str, tmp_path: Path) -> Iterator[Fleet]:
    with watched(Fleet(f"{postgres_dsn}?schema={pg_schema}", tmp_path / "effects.db", request.param, APP)) as running:
        yield running


def test_one_execution_per_tick_with_a_worker_killed_at_the_tick(fleet: Fleet) -> None:
    seeded = datetime.now(UTC) - timedelta(minutes=3, seconds=30)  # as after a stop: three ticks or four are due

    async def seed(store: Any) -> None:
        ticks.store = store
        await store.declare_schedule(every_minute.row(last_tick=seeded))

    fleet.store(seed)
    doomed = fleet.start_worker(TETHER_FAULTS="after_tick")  # dies once it recorded the first tick's execution
    assert doomed.wait(timeout=60) == -signal.SIGKILL
    [first] = fleet.executions()
    assert first.execution_id.startswith("every-minute@")
    [row] = fleet.store(lambda store: store.list_schedules())
    assert row.last_tick == seeded  # it died before moving the schedule on

    others = [fleet.start_worker(), fleet.start_worker()]
    fleet.wait(lambda rows: len(rows) >= 3 and all(e.status == "completed" for e in rows), "three ticks done")
    for proc in others:
        fleet.stop(proc)  # one may still be starting up (the other did the work): how it exits is not the point
    [row] = fleet.store(lambda store: store.list_schedules())
    expected, _ = due(row.model_copy(update={"last_tick": seeded}), row.last_tick)  # every tick up to the last seen
    rows = fleet.executions()
    assert sorted(e.execution_id for e in rows) == sorted(f"every-minute@{tick.isoformat()}" for tick in expected)
    assert len(expected) >= 3 and all(e.status == "completed" for e in rows)
