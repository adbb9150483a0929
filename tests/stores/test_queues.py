"""Queues at the store: what `take_queued` admits, on every store and both backends."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError
from tether.stores import Lease, NewExecution, QueueLimits, Store


async def enqueue(store: Store, execution_id: str, queue: str = "llm", **fields: Any) -> None:
    await store.enqueue_execution(NewExecution(execution_id=execution_id, runner="r", root_path="chain:r",
                                               queue=queue, **fields))


async def take(store: Store, queue: str = "llm", limit: int = 10) -> list[Lease]:
    return await store.take_queued(queue, owner="w1", lease_seconds=60, limit=limit)


def ids(leases: list[Lease]) -> list[str]:
    return [lease.execution_id for lease in leases]


async def test_concurrency_holds_and_a_slot_comes_back_when_its_run_ends(store: Store) -> None:
    await store.declare_queue(QueueLimits(name="llm", concurrency=2))
    for n in range(5):
        await enqueue(store, f"e{n}")
    assert await store.take_work(owner="w1", lease_seconds=60, limit=10) == []  # a queue's are its own
    first = await take(store)
    assert ids(first) == ["e0", "e1"]  # first come, first served
    assert await take(store) == []
    await store.release_lease(first[0], status="completed")
    assert ids(await take(store)) == ["e2"]
    await store.release_lease(first[1])  # handed back (a worker stopping): free, and ready again
    assert ids(await take(store)) == ["e1"]


async def test_per_key_caps_one_key_and_leaves_the_others_their_turn(store: Store) -> None:
    await store.declare_queue(QueueLimits(name="llm", concurrency=10, per_key=1))
    for n, key in enumerate(["t7", "t7", "t7", "t8", None]):
        await enqueue(store, f"e{n}", queue_key=key)
    assert ids(await take(store)) == ["e0", "e3", "e4"]
    assert await take(store) == []


async def test_priorities_are_served_in_order_and_fifo_within_one(store: Store) -> None:
    await store.declare_queue(QueueLimits(name="llm", concurrency=1, priority=True))
    for name, priority in [("late", 9), ("soon-1", 1), ("now", 0), ("soon-2", 1)]:
        await enqueue(store, name, priority=priority)
    order = []
    for _ in range(4):
        [lease] = await take(store)
        order.append(lease.execution_id)
        await store.release_lease(lease, status="completed")
    assert order == ["now", "soon-1", "soon-2", "late"]


async def test_the_rate_counts_starts_across_callers(store: Store) -> None:
    await store.declare_queue(QueueLimits(name="llm", rate_limit=2, rate_seconds=3600))
    for n in range(4):
        await enqueue(store, f"e{n}")
    started = await store.take_queued("llm", owner="w1", lease_seconds=60, limit=1)
    started += await store.take_queued("llm", owner="w2", lease_seconds=60, limit=10)
    assert ids(started) == ["e0", "e1"]
    for lease in started:
        await store.release_lease(lease, status="completed")
    assert await take(store) == []  # two starts this hour, however many run


async def test_an_undeclared_queue_admits_nothing_and_limits_are_replaced(store: Store) -> None:
    await enqueue(store, "e0", queue="other")
    assert await take(store, "other") == []
    await store.declare_queue(QueueLimits(name="other", concurrency=1))
    await store.declare_queue(QueueLimits(name="other", concurrency=3))
    await enqueue(store, "e1", queue="other")
    assert ids(await take(store, "other")) == ["e0", "e1"]


async def test_queue_stats_by_queue_and_key(store: Store) -> None:
    await store.declare_queue(QueueLimits(name="llm", concurrency=1))
    await store.declare_queue(QueueLimits(name="idle"))
    await enqueue(store, "e0", queue_key="t7")
    await enqueue(store, "e1", queue_key="t7")
    await enqueue(store, "e2", queue_key="t8")
    [lease] = await take(store)
    rows = {(r.queue, r.key): (r.waiting, r.running, r.admitted) for r in await store.queue_stats()}
    assert rows == {("idle", None): (0, 0, 0), ("llm", None): (2, 1, 1), ("llm", "t7"): (1, 1, 1),
                    ("llm", "t8"): (1, 0, 0)}
    assert lease.execution_id == "e0"
    [whole] = [r for r in await store.queue_stats() if r.queue == "llm" and r.key is None]
    assert whole.oldest_waiting is not None


@pytest.mark.parametrize("limits", [{"concurrency": 0}, {"per_key": -1}, {"rate_limit": 0, "rate_seconds": 1},
                                    {"rate_limit": 1, "rate_seconds": 0}, {"name": ""}])
def test_limits_out_of_range_are_refused(limits: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        QueueLimits(**{"name": "llm", **limits})


async def test_a_priority_out_of_range_is_refused_before_anything_is_written(store: Store) -> None:
    with pytest.raises(ValidationError):
        NewExecution(execution_id="e0", runner="r", root_path="chain:r", queue="llm", priority=-1)
    assert await store.get_execution("e0") is None
