"""Durable timers: ``await sleep(...)`` that outlives the process.

A timer is a step of the message being handled: its due time is journaled the
first time, so every replay waits for the same moment. Until then the execution
is parked, with no task and no lease held; a worker (``tether worker``) takes it
up when it is due, even if every process restarted meanwhile.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from tether.stores import UsageError

from . import telemetry
from .idempotent import current_step
from .interrupt import Parked, current_call


async def sleep_until(when: datetime) -> None:
    """Wait, durably, until ``when`` (an aware datetime).

    Call it while a durable actor of an execution handles a message (in a
    handler, an async node or an async tool). When it is not due yet, the
    execution parks: `Runtime.run` returns ``paused`` with no pending
    interrupt, and a worker resumes it once ``when`` has passed. The code
    before the call runs again then, as after any resume.

    Raises:
        UsageError: Not inside a durable actor of an execution, or a naive datetime.
    """
    if when.tzinfo is None:
        raise UsageError(f"sleep_until({when!r}) needs an aware datetime, e.g. datetime.now(UTC) + timedelta(days=1).")
    await _park_until(when, when.isoformat())


async def _park_until(when: datetime | timedelta, argument: str, *, here: bool = False) -> None:
    """Park until ``when``: a moment, or a duration from now on the runtime's clock.

    ``here``: a short wait that the process driving the run waits out itself (see `Parked`).
    """
    step = current_step.get()
    if step is None or current_call.get() is None:
        raise UsageError(
            "sleep() and sleep_until() are durable timers: call them while a durable actor of "
            "Runtime.run(...) handles a message (a node, a tool, or the handler). Use anyio.sleep otherwise."
        )
    # Keyed by what was asked, so timers running at once keep their own due times on a replay.
    key = step.local_key("sleep", argument)
    if key in step.recorded:
        step.replayed.add(key)
        due = datetime.fromisoformat(step.recorded[key])
    else:
        due = step.journal.hooks.now() + when if isinstance(when, timedelta) else when
        with telemetry.sleeping(step.journal, due):
            await step.journal.record_step(step.inbox_seq, "sleep", key, due.isoformat())
    if step.journal.hooks.now() < due:
        raise Parked(due, here=here)


async def sleep(seconds: float) -> None:
    """Wait, durably, for ``seconds``: `sleep_until` now plus that, fixed the first time."""
    await _park_until(timedelta(seconds=seconds), f"{seconds!r}s")
