"""Retention: how long finished executions are kept, applied by workers in the background.

```python
ExecutionWorker(store, runners, retention=Retention(completed=timedelta(days=30), failed=timedelta(days=90)))
```

or ``tether worker --retain completed=30d --retain failed=90d``. The worker then prunes, every
``every``, what the policy lets go: finished executions older than their
status's age (measured from their last change), in batches of ``batch``, one
short transaction each, so that a cleanup never holds the store for long and
never waits on a run. Running and paused executions are never touched, and a
thread's runs are kept while any of them is not old enough. A status the policy
does not name is kept for ever; ``tether prune`` is there for the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import anyio.lowlevel
from tether.stores import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Callable

    from tether.stores import ExecutionStatus, Store


@dataclass(frozen=True)
class Retention:
    """How long finished executions are kept, by status (None: for ever).

    Raises:
        ConfigurationError: An age that is not a positive `timedelta`, or a batch below 1.
    """

    completed: timedelta | None = None
    failed: timedelta | None = None
    cancelled: timedelta | None = None
    timed_out: timedelta | None = None
    every: timedelta = timedelta(minutes=10)
    """How often a worker applies it."""
    batch: int = 500
    """Executions deleted per transaction, at most."""

    def __post_init__(self) -> None:
        for setting in ("completed", "failed", "cancelled", "timed_out", "every"):
            value = getattr(self, setting)
            if value is not None and (not isinstance(value, timedelta) or value <= timedelta(0)):
                raise ConfigurationError(
                    f"Retention({setting}={value!r}): give a positive timedelta, e.g. timedelta(days=30), "
                    f"or None to keep them for ever."
                )
        if isinstance(self.batch, bool) or not isinstance(self.batch, int) or self.batch < 1:
            raise ConfigurationError(f"Retention(batch={self.batch!r}): delete at least 1 execution per transaction.")

    def ages(self) -> dict[ExecutionStatus, timedelta]:
        """The statuses it prunes, and after how long."""
        named: dict[ExecutionStatus, timedelta | None] = {
            "completed": self.completed, "failed": self.failed, "cancelled": self.cancelled,
            "timed_out": self.timed_out}
        return {status: age for status, age in named.items() if age is not None}

    async def apply(self, store: Store, *, now: Callable[[], datetime] | None = None) -> int:
        """Prune what the policy lets go, batch by batch; returns how many executions went.

        ``now``: the clock ages are counted on (the testing kit's `Clock` in tests).
        """
        deleted = 0
        for status, age in self.ages().items():
            cutoff = (now or _now)() - age
            while True:
                gone = await store.prune(older_than=cutoff, statuses=[status], limit=self.batch)
                deleted += gone
                if gone < self.batch:
                    break
                await anyio.lowlevel.checkpoint()  # between transactions: let the runs have the store
        return deleted


def _now() -> datetime:
    return datetime.now(UTC)
