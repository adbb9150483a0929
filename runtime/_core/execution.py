"""Executions: one durable run of a root actor, from `Start` to its output, across processes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import anyio
from pydantic import BaseModel, ConfigDict
from tether.stores import ExecutionStatus, Json, PendingInterrupt

if TYPE_CHECKING:
    from datetime import datetime

    from .journal import LeaseHolder


class Start(BaseModel):
    """The first message of every execution's root actor: the caller's input."""

    input: Json = None


class RunResult(BaseModel):
    """Where an execution stands after `Runtime.run`, `Runtime.resume` or a lookup."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True)

    execution_id: str
    status: ExecutionStatus
    output: Json = None
    pending_interrupt: PendingInterrupt | None = None
    """The oldest pending interrupt of a paused execution (`pending` has all of them)."""
    pending: list[PendingInterrupt] = []
    error: str | None = None


Outcome = Literal["completed", "paused", "failed", "cancelled", "timed_out"]
STOPPED: frozenset[str] = frozenset({"cancelled", "timed_out"})
"""The outcomes that come from outside the tree, and stop it wherever it is."""


@dataclass
class ExecutionState:
    """What every actor of one running execution shares."""

    execution_id: str
    holder: LeaseHolder
    done: anyio.Event = field(default_factory=anyio.Event)
    outcome: Outcome | None = None
    output: Any = None
    error: BaseException | None = None
    wake: datetime | None = None
    """The earliest durable timer of the actors that parked: when a worker should resume."""
    lost: bool = False
    """The lease was taken over: nothing more may be written, not even the outcome."""
    stirred: anyio.Event = field(default_factory=anyio.Event)
    """Set when the lease's keeper should look now: the run ended, or a cancel may have come."""
    keeping: bool = False
    """The keeper is renewing the lease or listening for cancels: ending the run must cancel it."""

    def end(self, outcome: Outcome, output: Any = None, error: BaseException | None = None) -> None:
        """The run's outcome, the first one given (a cancel or a deadline: ``output`` is the verdict's payload)."""
        if self.outcome is None:
            self.outcome, self.output, self.error = outcome, output, error
            self.done.set()
            self.stirred.set()

    wake_here: bool = False
    """Every timer the actors parked on is one to wait out in this process (a retry's backoff)."""
    waiting: list[dict[str, str]] = field(default_factory=list)
    """The actors parked in `wait_for`: ``{"path": ..., "type": ...}`` each, journaled with the pause."""
    seen: int = 0
    """The last journal entry every waiting actor read: a message after it may be one it waits for."""

    def awaits(self, path: str, expect: str, seen: int) -> None:
        self.seen = seen if not self.waiting else min(self.seen, seen)
        self.waiting.append({"path": path, "type": expect})

    def wake_at(self, due: datetime, *, here: bool = False) -> None:
        self.wake_here = here if self.wake is None else self.wake_here and here
        self.wake = due if self.wake is None else min(self.wake, due)
