"""Schedules: a runner started on a cron expression, once per tick across the whole fleet.

```python
digest = Schedule("digest", cron="0 9 * * MON-FRI", tz="Europe/Paris", runner=report, input={"kind": "daily"})
```

Declared at import time in the module the workers load; every worker then
looks at it on each poll. A tick's execution has an id derived from the
schedule and the tick (``digest@2026-12-04T08:00:00+00:00``), so however many
workers see the tick, and whichever of them dies around it, one execution
starts: starting an id that exists starts nothing. Only after the tick's
execution is recorded does a worker move the schedule's last tick on, with a
compare-and-set in the store, so a worker that dies in between leaves the tick
to the next.

Ticks missed while no worker ran (a full stop, a deploy) are handled by
``catch_up``: ``"skip"`` starts none of them (a tick counts as missed when it
is found more than a minute late), ``"latest"`` starts the most recent,
``"all"`` starts each, oldest first.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic_core import PydanticSerializationError, to_jsonable_python
from tether.runtime._core.actor import check_name
from tether.stores import CatchUp, ConfigurationError, NewExecution, ScheduleRow

from .queues import Queue, declared

if TYPE_CHECKING:
    from .runner import Runner

LATE = timedelta(minutes=1)
"""A tick found later than this is missed (what ``catch_up="skip"`` leaves out)."""
MOST_TICKS = 1000
"""Ticks one look starts at most (``catch_up="all"`` after a long stop): the rest come with the next looks."""


class Schedule:
    """A runner started on a cron schedule, in a time zone.

    Args:
        name: Its name, as ``tether schedules`` shows it and its executions' ids begin.
        cron: A cron expression of five fields (``"0 9 * * MON-FRI"``), read by cronsim.
        tz: The IANA time zone the expression is read in (``"Europe/Paris"``): 9:00
            there, in winter and in summer.
        runner: What each tick starts (an `Agent`, a `Chain`, a team...).
        input: The input each tick's execution gets.
        catch_up: For ticks missed while no worker ran: ``"skip"``, ``"latest"`` or ``"all"``.
        queue: A `Queue` (or its name) the ticks' executions go to.

    Raises:
        ConfigurationError: An invalid cron expression or time zone, an unknown
            ``catch_up``, an input that is not JSON, a queue not declared here, or a
            schedule of this name declared already with another definition.
    """

    def __init__(self, name: str, *, cron: str, runner: Runner, tz: str = "UTC", input: Any = None,
                 catch_up: CatchUp = "skip", queue: str | Queue | None = None) -> None:
        from cronsim import CronSim, CronSimError

        check_name("schedule", name)
        try:
            zone = ZoneInfo(tz)
        except (ZoneInfoNotFoundError, ValueError, TypeError):
            raise ConfigurationError(
                f"Schedule({name!r}, tz={tz!r}): not a time zone this machine knows; give an IANA name such as "
                f"'Europe/Paris' or 'UTC'."
            ) from None
        try:
            CronSim(cron, datetime.now(zone))
        except (CronSimError, TypeError) as exc:
            raise ConfigurationError(
                f"Schedule({name!r}, cron={cron!r}): not a cron expression ({exc}). Write five fields: minute "
                f"hour day-of-month month day-of-week, e.g. '0 9 * * MON-FRI'."
            ) from None
        if catch_up not in get_args(CatchUp):
            raise ConfigurationError(f"Schedule({name!r}, catch_up={catch_up!r}): give 'skip', 'latest' or 'all'.")
        try:
            self.input = to_jsonable_python(input)
        except PydanticSerializationError as exc:
            raise ConfigurationError(f"Schedule({name!r}): its input is not JSON ({exc}).") from None
        self.name, self.cron, self.tz, self.zone = name, cron, tz, zone
        self.runner, self.catch_up = runner, catch_up
        self.queue = None if queue is None else declared(queue)
        known = _declared.get(name)
        if known is not None and known.row(known_tick).definition() != self.row(known_tick).definition():
            raise ConfigurationError(
                f"Schedule {name!r} is declared twice in this process, with other definitions. Declare it once, in "
                f"the module your workers load."
            )
        _declared[name] = self

    def __repr__(self) -> str:
        return f"Schedule({self.name!r}, cron={self.cron!r}, tz={self.tz!r}, catch_up={self.catch_up!r})"

    def row(self, last_tick: datetime) -> ScheduleRow:
        """What the store keeps of it, counting from ``last_tick``."""
        actor = self.runner._prepare()
        return ScheduleRow(name=self.name, cron=self.cron, tz=self.tz, catch_up=self.catch_up,
                           runner=actor.__qualname__, root_path=self.runner.root_path,
                           fingerprint=self.runner.fingerprint, version=self.runner.version or "", input=self.input,
                           queue=None if self.queue is None else self.queue.name, last_tick=last_tick)


known_tick = datetime(2000, 1, 1, tzinfo=UTC)  # any moment: definitions are compared without their state


def due(row: ScheduleRow, now: datetime) -> tuple[list[datetime], datetime | None]:
    """The ticks to start now (UTC, oldest first), as ``catch_up`` keeps them, and the last tick passed.

    The schedule's last tick moves to the second, once the first are started; None: no tick has come.
    """
    from cronsim import CronSim

    zone = ZoneInfo(row.tz)
    passed: list[datetime] = []
    for tick in CronSim(row.cron, row.last_tick.astimezone(zone)):
        if tick > now:
            break
        passed.append(tick.astimezone(UTC))
        if len(passed) >= MOST_TICKS and row.catch_up == "all":
            break
    if not passed:
        return [], None
    if row.catch_up == "all":
        return passed, passed[-1]
    if row.catch_up == "latest" or now - passed[-1] <= LATE:
        return passed[-1:], passed[-1]
    return [], passed[-1]  # skip: missed, so passed over


def tick_execution(row: ScheduleRow, tick: datetime | None, *, now: datetime | None = None) -> NewExecution:
    """The execution of ``tick`` (its id derived from the schedule and the tick), or of a manual trigger at ``now``."""
    at = f"{tick.astimezone(UTC).isoformat()}" if tick is not None else f"manual-{(now or datetime.now(UTC)).isoformat()}"
    return NewExecution(execution_id=f"{row.name}@{at}", runner=row.runner, root_path=row.root_path,
                        fingerprint=row.fingerprint, version=row.version, input=row.input, queue=row.queue)


_declared: dict[str, Schedule] = {}


def declared_schedules() -> list[Schedule]:
    """Every schedule this process declared: what its workers start."""
    return list(_declared.values())
