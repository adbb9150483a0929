"""What a test may change about a runtime: its clock, where it dies, who watches its side effects.

A `Runtime` is given its hooks when it is made, ``Runtime(store, clock=...)`` or
``Runtime(store, hooks=...)``, and hands them to every part of its actor tree:
nothing in the kernel reads a clock or a crash point from anywhere else. A
runtime given none takes the process's default, `installed()`: the real clock
and the crash points armed by ``TETHER_FAULTS``. The testing kit's helpers
(``with Clock():``, ``Effects()``) install another default while they are
open, so that the runtimes a `Chain` or an `Agent` creates inside them take it
up without being handed it; ``crash_at(...)`` sets `wrapping` for its own task
only.

``TETHER_FAULTS`` is a comma-separated list of points at which the process
SIGKILLs itself, read once when the process starts:

- ``after_start``: a run's execution row committed, nothing journaled yet;
- ``after_claim``: a resume's claim committed, nothing after it has run;
- ``write:N``: just after the Nth journal write of this process committed
  (every boundary: a message accepted or handled, a step, a suspension);
- ``at:LABEL``: just after the first journal write holding an entry named
  ``LABEL`` committed (``node:charge``, ``turn:2/tool:charge``, or a full
  path such as ``chain:refund/node:charge``);
- ``before_record``: an ``@idempotent`` function returned (its side effect is
  done) and its record is not written yet;
- ``fork_started``: a fork's execution row committed, its journal not written yet;
- ``after_tick``: a worker recorded the execution of a schedule's tick, and has not
  moved the schedule past the tick yet.
"""

from __future__ import annotations

import dataclasses
import os
import signal
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from tether.stores import NewEntry, Store



def names(spec: str, path: str, label: str) -> bool:
    """Whether a boundary spec names the entry ``label`` written at ``path``."""
    full = f"{path}/{label}"
    return spec in (label, full) or full.endswith("/" + spec)


class Faults:
    """Crash points: the process SIGKILLs itself when it reaches an armed one.

    Unarmed, a point costs one lookup in an empty set.
    """

    def __init__(self, points: Sequence[str] = ()) -> None:
        self.armed: frozenset[str] = frozenset(p for p in points if p)
        self._write_at = next((int(p.split(":", 1)[1]) for p in self.armed if p.startswith("write:")), 0)
        self._labels = tuple(p.split(":", 1)[1] for p in self.armed if p.startswith("at:"))
        self._writes = 0

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> Faults:
        """The points ``TETHER_FAULTS`` arms."""
        return cls(environ.get("TETHER_FAULTS", "").split(","))

    def reached(self, point: str) -> None:
        """Die here with SIGKILL if this point is armed."""
        if point in self.armed:
            os.kill(os.getpid(), signal.SIGKILL)

    def wrote(self, entries: Sequence[NewEntry] = ()) -> None:
        """Count a committed journal write; die after the armed one."""
        if self._labels and any(names(spec, e.path, e.label) for e in entries for spec in self._labels):
            os.kill(os.getpid(), signal.SIGKILL)
        if not self._write_at:
            return
        self._writes += 1
        if self._writes == self._write_at:
            os.kill(os.getpid(), signal.SIGKILL)

    @property
    def writes(self) -> int:
        """Journal writes committed so far (counted only while ``write:N`` is armed)."""
        return self._writes


def _system_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Hooks:
    """A runtime's clock, crash points and observers; `replace` makes a changed copy.

    Attributes:
        clock: What durable timers, approval deadlines and workers read as now
            (aware, UTC). Leases are not on it: their expiry is the database's.
        faults: The crash points armed in this process.
        observers: Called with ``("ran", function, key)`` each time an
            ``@idempotent`` body runs, and ``("cut", "", key)`` when a simulated
            crash refuses the record of a body that ran.
        heirs: Execution id -> lease owner of a run known to be dead: the next
            drive of it takes the lease over at once instead of waiting it out.
            Shared by the copies `replace` makes, so it outlives the helper
            that simulated the crash.
    """

    clock: Callable[[], datetime] = _system_now
    faults: Faults = field(default_factory=Faults)
    observers: tuple[Callable[[str, str, str], None], ...] = ()
    heirs: dict[str, str] = field(default_factory=dict)

    def now(self) -> datetime:
        """The current time on this runtime's clock."""
        return self.clock()

    def replace(self, **changes: object) -> Hooks:
        """A copy with ``changes`` (``hooks.replace(clock=clock.now)``)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def ran(self, function: str, key: str) -> None:
        """An ``@idempotent`` body ran (its side effect happened) under ``key``."""
        for observe in self.observers:
            observe("ran", function, key)

    def cut(self, key: str) -> None:
        """A body ran under ``key``, and the process died before its record was written."""
        for observe in self.observers:
            observe("cut", "", key)


_installed = Hooks(faults=Faults.from_environ())

wrapping: ContextVar[Callable[[Store], Store] | None] = ContextVar("tether_wrapping", default=None)
"""A store wrapper for the runtimes made in this context only (``crash_at``): unlike the
installed hooks, one task's simulated crash never reaches a runtime another task makes."""


def installed() -> Hooks:
    """The hooks a runtime made now takes when it is given none."""
    return _installed


def install(hooks: Hooks) -> Hooks:
    """Make ``hooks`` the default of runtimes made from now on; returns the previous default.

    For the testing kit, which restores the previous one when its helper closes.
    """
    global _installed
    previous, _installed = _installed, hooks
    return previous

