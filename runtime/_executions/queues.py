"""Queues: how many executions of a kind run at once across a fleet of workers, and how fast they start.

A `Queue` is declared in the application, at import time, next to its runners,
so that every process that loads the application declares the same one:

```python
llm = Queue("llm", concurrency=8, per_key=2, rate=Rate(60, per=timedelta(minutes=1)), priority=True)

await refund.start(order, execution_id="r-1", queue=llm, key="tenant-7", priority=5)
```

A detached start in a queue waits, ``queued``, until a worker admits it. A
worker admits an execution in the same transaction that counts what the queue
runs, under a lock on the queue's row in the store, so the limits hold across
any number of workers: ``concurrency`` executions of the queue leased at once
(a worker that dies holding some gives them back with its leases), ``per_key``
of one key (a tenant, a user), ``rate`` starts per period; among those waiting,
a lower ``priority`` goes first, and the oldest first within one. The limits
cover what workers run: resumes and recoveries take a slot like starts (the
rate counts starts only); a ``resume`` or ``recover`` made in a process of its
own runs the execution there, outside the queue.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta

from tether.runtime._core.actor import check_name
from tether.stores import MAX_PRIORITY, ConfigurationError, QueueLimits


@dataclass(frozen=True)
class Rate:
    """At most ``limit`` starts per ``per``: ``Rate(60, per=timedelta(minutes=1))``.

    Raises:
        ConfigurationError: ``limit`` is not a positive whole number, or ``per`` is not a positive time.
    """

    limit: int
    per: timedelta

    def __post_init__(self) -> None:
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1:
            raise ConfigurationError(f"Rate(limit={self.limit!r}): a rate admits a whole number of starts, 1 or more.")
        if not isinstance(self.per, timedelta) or not (self.per.total_seconds() > 0 and math.isfinite(
                self.per.total_seconds())):
            raise ConfigurationError(f"Rate(per={self.per!r}): give a positive timedelta, e.g. timedelta(minutes=1).")


_declared: dict[str, Queue] = {}
"""The queues this process declared, by name."""


class Queue:
    """A named queue with limits that hold across every worker of a store.

    Args:
        name: Its name, as executions and ``tether queues`` show it.
        concurrency: Executions of the queue running at once, at most (None: no limit).
        per_key: Executions of one key running at once, at most (a start's ``key=``).
        rate: Starts admitted per period, at most (a `Rate`).
        priority: Whether starts may have a ``priority=`` (lower runs first).

    Raises:
        ConfigurationError: A limit is not a positive whole number, or the process
            declared a queue of this name with other limits already.
    """

    def __init__(self, name: str, *, concurrency: int | None = None, per_key: int | None = None,
                 rate: Rate | None = None, priority: bool = False) -> None:
        check_name("queue", name)
        for setting, value in (("concurrency", concurrency), ("per_key", per_key)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigurationError(
                    f"Queue({name!r}, {setting}={value!r}): give a whole number, 1 or more, or None for no limit."
                )
        if rate is not None and not isinstance(rate, Rate):
            raise ConfigurationError(f"Queue({name!r}, rate={rate!r}): give a Rate, e.g. Rate(60, per=timedelta(minutes=1)).")
        self.name = name
        self.concurrency = concurrency
        self.per_key = per_key
        self.rate = rate
        self.priority = priority
        known = _declared.get(name)
        if known is not None and known.limits != self.limits:
            raise ConfigurationError(
                f"Queue {name!r} is declared twice in this process, with other limits: {known!r} and {self!r}. "
                f"Declare it once, in the module the workers load, and import it where it is used."
            )
        _declared[name] = self

    @property
    def limits(self) -> QueueLimits:
        """What the store keeps of it, for every worker to admit by."""
        return QueueLimits(name=self.name, concurrency=self.concurrency, per_key=self.per_key,
                           rate_limit=None if self.rate is None else self.rate.limit,
                           rate_seconds=None if self.rate is None else self.rate.per.total_seconds(),
                           priority=self.priority)

    def __repr__(self) -> str:
        shown = [f"{setting}={value!r}" for setting, value in (
            ("concurrency", self.concurrency), ("per_key", self.per_key), ("rate", self.rate),
            ("priority", self.priority or None)) if value is not None]
        return f"Queue({', '.join([repr(self.name), *shown])})"

    def placement(self, key: str | None, priority: int | None) -> tuple[str | None, int]:
        """``key`` and ``priority`` checked for a start in this queue.

        Raises:
            ConfigurationError: A priority given to a queue without priorities, or out of range.
        """
        if priority is not None and not self.priority:
            raise ConfigurationError(
                f"priority={priority!r} for queue {self.name!r}, which has no priorities: declare it with "
                f"Queue({self.name!r}, ..., priority=True), or start without one."
            )
        if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)
                                     or not 0 <= priority <= MAX_PRIORITY):
            raise ConfigurationError(
                f"priority={priority!r}: a priority is a whole number from 0 (first) to {MAX_PRIORITY}."
            )
        if key is not None and (not isinstance(key, str) or not key or len(key) > 512):
            raise ConfigurationError(f"key={key!r}: a key is a non-empty string of at most 512 characters.")
        return key, priority or 0


def declared(queue: str | Queue) -> Queue:
    """The queue this process declared under that name (or that object, checked to be the one declared).

    Raises:
        ConfigurationError: No queue of that name is declared here.
    """
    name = queue.name if isinstance(queue, Queue) else queue
    found = _declared.get(name) if isinstance(name, str) else None
    if found is None:
        known = ", ".join(sorted(_declared)) or "none"
        raise ConfigurationError(
            f"No queue {name!r} is declared in this process (declared: {known}). Declare it, "
            f"Queue({name!r}, concurrency=...), in the module your runners live in, so that workers declare it too."
        )
    return found


def declared_queues() -> list[Queue]:
    """Every queue this process declared: what its workers serve by default."""
    return list(_declared.values())
