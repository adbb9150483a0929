"""Schedules from the public API, on the testing kit's clock: one execution per tick, catch-up, zones, bad input."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from tether.actors import Chain
from tether.runtime import ExecutionWorker, Queue, Schedule
from tether.runtime.testing import Clock
from tether.stores import ConfigurationError, Store

T0 = datetime(2026, 12, 3, 9, 0, 30, tzinfo=UTC)  # a Thursday, in winter (Paris is UTC+1)


def unique() -> str:
    return f"s-{uuid.uuid4().hex[:8]}"


def job(store: Store) -> Chain:
    return Chain("report", [lambda state: {"sent": state["kind"]}], store=store)


async def serve(store: Store, chain: Chain, schedule: Schedule, clock: Clock) -> None:
    async with ExecutionWorker(store, [chain], notify=False, clock=clock.now, schedules=[schedule]) as worker:
        await worker.serve(until_idle=True)


async def started(store: Store, schedule: Schedule) -> dict[str, str]:
    return {e.execution_id.partition("@")[2]: e.status for e in await store.list_executions(limit=1000)
            if e.execution_id.startswith(schedule.name + "@")}


async def test_each_tick_starts_one_execution(store: Store) -> None:
    chain = job(store)
    with Clock(T0) as clock:
        schedule = Schedule(unique(), cron="*/5 * * * *", runner=chain, input={"kind": "daily"}, catch_up="all")
        await serve(store, chain, schedule, clock)  # declared at T0: nothing has come yet
        assert await started(store, schedule) == {}
        clock.advance(minutes=15)
        await serve(store, chain, schedule, clock)
        await serve(store, chain, schedule, clock)  # another look, another worker: nothing more
    assert await started(store, schedule) == {"2026-12-03T09:05:00+00:00": "completed",
                                              "2026-12-03T09:10:00+00:00": "completed",
                                              "2026-12-03T09:15:00+00:00": "completed"}
    execution = await store.get_execution(f"{schedule.name}@2026-12-03T09:05:00+00:00")
    assert execution is not None and execution.input == {"kind": "daily"}


@pytest.mark.parametrize(("catch_up", "expected"), [
    ("skip", []), ("latest", ["2026-12-03T10:00:00+00:00"]),
    ("all", [f"2026-12-03T{h:02d}:{m:02d}:00+00:00" for h, m in [(9, 5), (9, 10), (9, 15), (9, 20), (9, 25),
                                                               (9, 30), (9, 35), (9, 40), (9, 45), (9, 50),
                                                               (9, 55), (10, 0)]]),
])
async def test_ticks_missed_during_a_full_stop(store: Store, catch_up: str, expected: list[str]) -> None:
    chain = job(store)
    with Clock(T0) as clock:
        schedule = Schedule(unique(), cron="*/5 * * * *", runner=chain, input={"kind": "x"},
                            catch_up=catch_up)  # type: ignore[arg-type]
        await serve(store, chain, schedule, clock)
        clock.advance(hours=1, minutes=2)  # no worker ran for an hour: twelve ticks came and went
        await serve(store, chain, schedule, clock)
        assert sorted(await started(store, schedule)) == expected
        clock.advance(minutes=3, seconds=10)  # the next tick, seen in time: every policy starts it
        await serve(store, chain, schedule, clock)
    assert "2026-12-03T10:05:00+00:00" in await started(store, schedule)


async def test_a_tick_is_read_in_its_time_zone(store: Store) -> None:
    chain = job(store)
    with Clock(T0) as clock:
        schedule = Schedule(unique(), cron="0 9 * * MON-FRI", tz="Europe/Paris", runner=chain, input={"kind": "x"},
                            catch_up="all")
        await serve(store, chain, schedule, clock)
        clock.advance(days=1)  # past Friday 9:00 in Paris, 8:00 UTC
        await serve(store, chain, schedule, clock)
    assert await started(store, schedule) == {"2026-12-04T08:00:00+00:00": "completed"}


async def test_a_tick_can_go_to_a_queue(store: Store) -> None:
    chain = job(store)
    queue = Queue(unique(), concurrency=1)
    with Clock(T0) as clock:
        schedule = Schedule(unique(), cron="*/5 * * * *", runner=chain, input={"kind": "x"}, queue=queue)
        await serve(store, chain, schedule, clock)
        clock.advance(minutes=5)
        async with ExecutionWorker(store, [chain], notify=False, clock=clock.now, schedules=[schedule],
                                   queues=[queue]) as worker:
            await worker.serve(until_idle=True)
    [execution] = [e for e in await store.list_executions(limit=100) if e.execution_id.startswith(schedule.name)]
    assert (execution.queue, execution.status) == (queue.name, "completed")


def test_bad_schedules_are_refused() -> None:
    chain = Chain("report", [lambda state: {"sent": True}])
    cases: list[tuple[dict[str, Any], str]] = [
        ({"cron": "61 * * * *"}, "not a cron expression"),
        ({"cron": "every day"}, "not a cron expression"),
        ({"cron": "0 9 * * *", "tz": "Mars/Olympus"}, "not a time zone this machine knows"),
        ({"cron": "0 9 * * *", "catch_up": "some"}, "give 'skip', 'latest' or 'all'"),
        ({"cron": "0 9 * * *", "input": object()}, "its input is not JSON"),
        ({"cron": "0 9 * * *", "queue": "nowhere"}, "No queue 'nowhere' is declared"),
    ]
    for options, message in cases:
        with pytest.raises(ConfigurationError, match=message):
            Schedule(unique(), runner=chain, **options)
    name = unique()
    Schedule(name, cron="0 9 * * *", runner=chain)
    Schedule(name, cron="0 9 * * *", runner=chain)  # the same again
    with pytest.raises(ConfigurationError, match="declared twice in this process"):
        Schedule(name, cron="0 10 * * *", runner=chain)
