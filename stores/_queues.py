"""How a queue admits executions: the choice every store makes the same way, once it has counted.

A store locks the queue's row (Postgres) or holds the write lock (SQLite, the
memory store's one process), counts what the queue runs and what it started
in its rate period, reads the ready candidates in order, and leases what
`admit` picks. The counts and the leases are in one transaction, so no two
workers admit past a limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._models import QueueLimits, QueueStats

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from datetime import datetime


@dataclass(frozen=True)
class Candidate:
    """A ready execution of the queue, as its turn comes (priority, then age)."""

    execution_id: str
    key: str | None
    start: bool
    """Not started yet (``queued``): the rate counts it. A resume or a recovery it does not."""


def room(limits: QueueLimits, running: Mapping[str | None, int], limit: int) -> int:
    """How many more the queue can lease now, for a caller that takes at most ``limit``."""
    if limits.concurrency is None:
        return limit
    return max(0, min(limit, limits.concurrency - sum(running.values())))


def fetch_size(free: int, running: Mapping[str | None, int]) -> int:
    """How many candidates to read for `admit` to fill ``free`` slots: those of full keys are passed over."""
    return 2 * free + sum(running.values())


def admit(limits: QueueLimits, candidates: Sequence[Candidate], running: Mapping[str | None, int],
          admitted: int, free: int) -> list[str]:
    """The candidates to lease now, in their order: within ``free``, ``per_key`` and, for starts, the rate."""
    starts = None if limits.rate_limit is None else limits.rate_limit - admitted
    per_key = dict(running)
    taken: list[str] = []
    for candidate in candidates:
        if len(taken) >= free:
            break
        if limits.per_key is not None and candidate.key is not None \
                and per_key.get(candidate.key, 0) >= limits.per_key:
            continue
        if candidate.start and starts is not None:
            if starts <= 0:
                continue
            starts -= 1
        per_key[candidate.key] = per_key.get(candidate.key, 0) + 1
        taken.append(candidate.execution_id)
    return taken


@dataclass
class Counts:
    """One key's executions in a queue, as `Store.queue_stats` counts them."""

    waiting: int = 0
    running: int = 0
    admitted: int = 0
    oldest: datetime | None = None

    def waited(self, since: datetime) -> None:
        """One more waits, since ``since``."""
        self.waiting += 1
        self.oldest = since if self.oldest is None else min(self.oldest, since)


def stats(name: str, keys: Mapping[str | None, Counts]) -> list[QueueStats]:
    """The queue's row (key None: its sums), then one per key, by key."""
    oldest = [c.oldest for c in keys.values() if c.oldest is not None]
    rows = [QueueStats(queue=name, key=None, waiting=sum(c.waiting for c in keys.values()),
                       running=sum(c.running for c in keys.values()), admitted=sum(c.admitted for c in keys.values()),
                       oldest_waiting=min(oldest) if oldest else None)]
    rows += [QueueStats(queue=name, key=key, waiting=c.waiting, running=c.running, admitted=c.admitted,
                        oldest_waiting=c.oldest) for key, c in sorted(keys.items(), key=lambda kv: kv[0] or "")
             if key is not None]
    return rows
