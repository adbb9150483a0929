"""Schedules at the store: declared once, moved on by compare-and-set, paused and resumed; every store, both backends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tether.stores import ScheduleRow, Store

T0 = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)


def row(**changes: object) -> ScheduleRow:
    fields: dict[str, object] = {"name": "digest", "cron": "*/5 * * * *", "tz": "Europe/Paris", "runner": "Chain[d]",
                                 "root_path": "chain:d", "input": {"kind": "daily"}, "last_tick": T0}
    return ScheduleRow.model_validate({**fields, **changes})


async def test_a_redeclared_schedule_keeps_its_state_and_takes_the_new_definition(store: Store) -> None:
    assert await store.list_schedules() == []
    assert await store.declare_schedule(row()) == row()
    assert await store.advance_schedule("digest", seen=T0, to=T0 + timedelta(minutes=5))
    await store.pause_schedule("digest", paused=True, now=T0)
    again = await store.declare_schedule(row(cron="0 9 * * *", last_tick=T0 + timedelta(days=1)))
    assert (again.cron, again.last_tick, again.paused) == ("0 9 * * *", T0 + timedelta(minutes=5), True)
    assert await store.list_schedules() == [again]


async def test_only_one_caller_moves_a_schedule_past_a_tick(store: Store) -> None:
    await store.declare_schedule(row())
    tick = T0 + timedelta(minutes=5)
    assert await store.advance_schedule("digest", seen=T0, to=tick)
    assert not await store.advance_schedule("digest", seen=T0, to=tick)  # the other one saw T0 too: too late
    assert not await store.advance_schedule("nothing", seen=T0, to=tick)
    [stored] = await store.list_schedules()
    assert stored.last_tick == tick


async def test_a_resumed_schedule_counts_from_then(store: Store) -> None:
    await store.declare_schedule(row())
    paused = await store.pause_schedule("digest", paused=True, now=T0 + timedelta(hours=1))
    assert paused is not None and paused.paused and paused.last_tick == T0
    resumed = await store.pause_schedule("digest", paused=False, now=T0 + timedelta(hours=2))
    assert resumed is not None and not resumed.paused and resumed.last_tick == T0 + timedelta(hours=2)
    assert await store.pause_schedule("nothing", paused=True, now=T0) is None
