"""`crash_sweep`: crash a workflow at every boundary of its run, recover, compare."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from tether.runtime._core import hooks
from tether.stores import ConfigurationError

from ._crash import CrashPoint, crash_at
from ._effects import Effects

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from tether.runtime._core.execution import RunResult
    from tether.stores import PendingInterrupt


class Runnable(Protocol):
    """A `Chain`, `Agent`, `Swarm` or `Supervisor`, as a sweep uses it."""

    async def run(self, input: Any = None, *, execution_id: str) -> RunResult:
        """Run to the end or to a pause."""
        ...

    async def resume(self, execution_id: str, value: Any = None, *, path: str | None = None) -> RunResult:
        """Continue after a pause or a crash."""
        ...


@dataclass
class SweepRun:
    """One crashed-and-recovered run of a sweep."""

    write: int
    """The journal write it died after (1 is the first)."""
    boundary: str
    """That write's last entry, ``path/label``."""
    result: RunResult
    """What recovery ended with."""


@dataclass
class SweepReport:
    """What `crash_sweep` did: the reference run, and one recovered run per boundary."""

    reference: RunResult
    boundaries: list[str]
    """``path/label`` of the last entry of each journal write of the reference run."""
    runs: list[SweepRun] = field(default_factory=list)
    effects: Effects = field(default_factory=Effects)
    """Every ``@idempotent`` body run during the sweep, by key."""

    @property
    def mismatches(self) -> list[str]:
        """Each way a recovered run differs from the reference, or a side effect ran twice uncut."""
        expected = (self.reference.status, self.reference.output)
        found = [
            f"crash after write {run.write} ({run.boundary}): {run.result.status} {run.result.output!r}, "
            f"expected {expected[0]} {expected[1]!r}"
            for run in self.runs
            if (run.result.status, run.result.output) != expected
        ]
        found += [f"{fn} ran {n} times for key {key}" for (fn, key), n in self.effects.runs.items()
                  if n > 1 and not (key in self.effects.cut and n == 2)]
        return found

    @property
    def repeated_after_cut(self) -> list[str]:
        """Side effects run twice because the crash fell while they ran in a parallel branch.

        Real crashes can do this too; only the service's deduplication by
        ``idempotency_key()`` makes these once. Which keys, if any, depends on
        timing, so `crash_sweep` fails on them only with ``strict=True``.
        """
        return [f"{fn} ran {n} times for key {key}" for (fn, key), n in self.effects.runs.items()
                if n > 1 and key in self.effects.cut]


async def crash_sweep(
    runner: Runnable,
    input: Any = None,
    *,
    decide: Callable[[PendingInterrupt], Any] | None = None,
    prefix: str = "sweep",
    check: bool = True,
    strict: bool = False,
) -> SweepReport:
    """Prove that a workflow survives a crash at every boundary, in this process.

    Runs it once to learn its boundaries (the reference, ``<prefix>-ref``).
    Then, for each journal write N of that run, runs it again as
    ``<prefix>-N``, crashed with `crash_at` just after write N, recovers it with
    ``resume``, and compares the outcome with the reference. Pauses for approval
    are answered by ``decide(pending)``, in every run alike.

    Args:
        runner: A `Chain`, `Agent`, `Swarm` or `Supervisor` with its store.
        input: The run's input.
        decide: The decision for a pending interrupt (needed if the run pauses).
        prefix: Execution ids are ``<prefix>-ref`` and ``<prefix>-1``, ``-2``, ...
        check: Raise when a recovered run differs or a side effect ran twice.
        strict: Count `SweepReport.repeated_after_cut` as differences too.

    Raises:
        AssertionError: With ``check``, listing every mismatch.
        ConfigurationError: The run pauses and there is no ``decide``, or it
            waits on a durable timer (move a `Clock` and use `run_due` for those).
    """
    with Effects() as effects:
        counter = CrashPoint(0)  # never fires: it counts the reference run's writes
        token = hooks.wrapping.set(counter._wrap)
        try:
            reference = await _to_the_end(runner, f"{prefix}-ref", input, decide)
        finally:
            hooks.wrapping.reset(token)
        report = SweepReport(reference, counter.boundaries, effects=effects)
        for write in range(1, counter.writes + 1):
            execution_id = f"{prefix}-{write}"
            async with crash_at(write) as point:
                await _to_the_end(runner, execution_id, input, decide)
            result = await _to_the_end(runner, execution_id, input, decide, recover=True)
            report.runs.append(SweepRun(write, point.boundaries[-1], result))
    found = report.mismatches + (report.repeated_after_cut if strict else [])
    if check and found:
        raise AssertionError("crash sweep found differences:\n  " + "\n  ".join(found))
    return report


async def _to_the_end(runner: Runnable, execution_id: str, input: Any,
                      decide: Callable[[PendingInterrupt], Any] | None, *, recover: bool = False) -> RunResult:
    """Run (or recover), answering every pause with ``decide``, until the execution ends."""
    first: Awaitable[RunResult] = (runner.resume(execution_id) if recover
                                   else runner.run(input, execution_id=execution_id))
    result = await first
    while result.status == "paused":
        pending = result.pending_interrupt
        if pending is None:
            raise ConfigurationError(
                f"{execution_id} waits on a durable timer, and crash_sweep does not move clocks; "
                f"test timers with Clock and run_due."
            )
        if decide is None:
            raise ConfigurationError(
                f"{execution_id} paused at {pending.agent_path} ({pending.reason}); pass decide= to answer it."
            )
        result = await runner.resume(execution_id, decide(pending), path=pending.agent_path)
    return result
