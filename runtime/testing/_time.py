"""A clock the test moves, and `run_due`: what a worker would do at that moment."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Self

from tether.runtime._core import hooks
from tether.runtime._executions.worker import decide_overdue
from tether.stores import ConfigurationError

if TYPE_CHECKING:
    from types import TracebackType

    from tether.runtime._core.execution import RunResult
    from tether.runtime._executions.runner import Runner
    from tether.stores import Execution, Store


class Clock:
    """A wall clock that stands still until the test moves it.

    Inside ``with Clock() as clock:`` durable timers (`tether.runtime.sleep`) and
    approval deadlines (``interrupt(..., timeout=...)``) read this clock, so
    ``clock.advance(days=2)`` makes a two-day deadline pass at once; `run_due`
    then does what a worker would. Leases keep the database's clock: a crash
    test does not need to move this one.

    Example:
        ```python
        with Clock() as clock:
            assert (await chain.run(order, execution_id="o-1")).status == "paused"
            clock.advance(days=2)
            [result] = await run_due(chain)     # the deadline decided with its default
        ```
    """

    def __init__(self, start: datetime | None = None) -> None:
        if start is not None and start.tzinfo is None:
            raise ValueError(f"Clock(start={start!r}) needs an aware datetime, e.g. datetime.now(UTC).")
        self._now = start or datetime.now(UTC)
        self._previous: list[hooks.Hooks] = []

    def now(self) -> datetime:
        """The time it shows."""
        return self._now

    def advance(self, delta: timedelta | None = None, /, *, days: float = 0, hours: float = 0,
                minutes: float = 0, seconds: float = 0) -> datetime:
        """Move forward (``advance(timedelta(hours=1))`` or ``advance(hours=1)``); returns the new time."""
        step = (delta or timedelta()) + timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
        if step < timedelta():
            raise ValueError(f"A clock only moves forward; advance({step}) would take it back.")
        self._now += step
        return self._now

    def __enter__(self) -> Self:
        self._previous.append(hooks.install(hooks.installed().replace(clock=self.now)))
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        hooks.install(self._previous.pop())


async def run_due(*runners: Runner) -> list[RunResult]:
    """Carry out, here and now, what a worker would at this moment of the clock.

    Decides every approval whose deadline has passed with its default (as
    ``by="deadline"``), then continues every paused execution of these runners
    that has such a decision or a durable timer that is due. Executions of other
    runners are left alone.

    Returns:
        The results of the executions it continued, oldest first.

    Raises:
        ConfigurationError: No runner given, or runners on different stores.
    """
    if not runners:
        raise ConfigurationError("run_due() needs the runners whose executions it may continue.")
    store = runners[0].store
    if store is None or any(r.store is not store for r in runners):
        raise ConfigurationError("run_due() runners must share one store (set runner.store to it).")
    by_root = {r.root_path: r for r in runners}
    decided = set(await decide_overdue(store, list(by_root)))
    now = hooks.installed().now()
    results: list[RunResult] = []
    for execution in await _paused(store):
        due = execution.wake_at is not None and execution.wake_at <= now
        runner = by_root.get(execution.root_path)
        if runner is not None and (due or execution.execution_id in decided):
            results.append(await runner.resume(execution.execution_id))
    return results


async def _paused(store: Store) -> list[Execution]:
    """Executions waiting for their time or a decision (paused), or decided and waiting to go on."""
    found: list[Execution] = []
    for status in ("paused", "decided"):
        page: list[Execution] = []
        while page := await store.list_executions(status=status, limit=100, after=page[-1] if page else None):
            found += page
    return sorted(found, key=lambda e: (e.created_at, e.execution_id))
