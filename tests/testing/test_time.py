"""A clock the test moves: durable timers and approval deadlines come due at once, with `run_due`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from tether.actors import Chain
from tether.runtime import Resume, interrupt, sleep
from tether.runtime.testing import Clock, run_due
from tether.stores import ConfigurationError, Store


def reminder_chain(store: Store) -> Chain:
    async def wait_two_days(state: dict[str, Any]) -> dict[str, Any]:
        await sleep(timedelta(days=2).total_seconds())
        return {"reminded": True}

    return Chain("reminder", [wait_two_days], store=store)


def approval_chain(store: Store) -> Chain:
    def approve(state: dict[str, Any]) -> dict[str, Any]:
        decision = interrupt("approval", {}, timeout=timedelta(days=2), default=Resume(approved=False))
        return {"approved": decision.approved}

    return Chain("expiring", [approve], store=store)


async def test_a_two_day_timer_fires_when_the_clock_passes_it(tether_store: Store, tether_clock: Clock) -> None:
    chain = reminder_chain(tether_store)
    paused = await chain.run({}, execution_id="t-1")
    assert paused.status == "paused" and paused.pending_interrupt is None

    tether_clock.advance(days=1, hours=23)
    assert await run_due(chain) == []  # not due yet: nothing runs
    tether_clock.advance(hours=1)
    [result] = await run_due(chain)
    assert result.status == "completed" and result.output == {"reminded": True}
    assert await run_due(chain) == []


async def test_a_deadline_decides_with_its_default_once_it_passes(tether_store: Store, tether_clock: Clock) -> None:
    chain = approval_chain(tether_store)
    paused = await chain.run({}, execution_id="d-1")
    assert paused.pending_interrupt is not None
    assert paused.pending_interrupt.deadline == tether_clock.now() + timedelta(days=2)

    tether_clock.advance(days=1)
    assert await run_due(chain) == []
    assert len(await tether_store.list_pending(execution_id="d-1")) == 1

    tether_clock.advance(days=1, seconds=1)
    [result] = await run_due(chain)
    assert result.status == "completed" and result.output == {"approved": False}
    [resumed] = [e for e in await tether_store.read_journal("d-1") if e.kind == "resumed"]
    assert resumed.payload["by"] == "deadline"


async def test_run_due_leaves_other_runners_executions_alone(tether_store: Store, tether_clock: Clock) -> None:
    reminders, approvals = reminder_chain(tether_store), approval_chain(tether_store)
    await reminders.run({}, execution_id="t-2")
    await approvals.run({}, execution_id="d-2")
    tether_clock.advance(days=3)
    [result] = await run_due(reminders)
    assert result.execution_id == "t-2"
    assert len(await tether_store.list_pending(execution_id="d-2")) == 1  # overdue, but not its runner's
    [result] = await run_due(approvals)
    assert result.execution_id == "d-2" and result.output == {"approved": False}


def test_a_clock_starts_now_moves_forward_only_and_is_installed_while_open() -> None:
    from tether.runtime._core import hooks

    start = datetime(2030, 1, 1, tzinfo=UTC)
    with Clock(start) as clock:
        assert hooks.installed().now() == start
        assert clock.advance(timedelta(hours=1), minutes=30) == start + timedelta(hours=1, minutes=30)
        with pytest.raises(ValueError, match="only moves forward"):
            clock.advance(seconds=-1)
    assert hooks.installed().now() != clock.now()
    with pytest.raises(ValueError, match="aware datetime"):
        Clock(datetime(2030, 1, 1))  # naive: the mistake under test


async def test_run_due_needs_runners_on_one_store(tether_store: Store) -> None:
    with pytest.raises(ConfigurationError, match="needs the runners"):
        await run_due()
    with pytest.raises(ConfigurationError, match="share one store"):
        await run_due(reminder_chain(tether_store), approval_chain(None))  # type: ignore[arg-type]
