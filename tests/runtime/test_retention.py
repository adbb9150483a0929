"""Retention: finished executions pruned by status and age, in batches, while runs go on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest
from tether.actors import Chain
from tether.runtime import ExecutionWorker, Retention
from tether.stores import ConfigurationError, NewExecution, Store

DAY = timedelta(days=1)


async def finished(store: Store, execution_id: str, status: str, thread: str | None = None) -> None:
    started = await store.start_execution(NewExecution(execution_id=execution_id, runner="r", root_path="chain:r",
                                                       thread=thread), owner="t", lease_seconds=60)
    assert started.lease is not None
    if status != "running":
        await store.release_lease(started.lease, status=status)  # type: ignore[arg-type]


def later(days: int) -> Any:
    return lambda: datetime.now(UTC) + days * DAY


async def left(store: Store) -> set[str]:
    return {e.execution_id for e in await store.list_executions(limit=1000)}


async def test_a_policy_prunes_only_what_it_names(store: Store) -> None:
    for n in range(5):
        await finished(store, f"done-{n}", "completed")
    await finished(store, "broke", "failed")
    await finished(store, "stopped", "cancelled")
    await finished(store, "waits", "paused")
    await finished(store, "t-1", "completed", thread="chat")  # its thread has a run that is not finished
    await finished(store, "t-2", "paused", thread="chat")
    policy = Retention(completed=30 * DAY, failed=90 * DAY, batch=2)
    assert await policy.apply(store, now=later(10)) == 0  # nothing is old enough yet
    assert await policy.apply(store, now=later(31)) == 5
    assert await left(store) == {"broke", "stopped", "waits", "t-1", "t-2"}
    assert await policy.apply(store, now=later(91)) == 1
    assert await left(store) == {"stopped", "waits", "t-1", "t-2"}  # cancelled: not named, kept for ever


async def test_a_prune_batch_takes_the_oldest_first(store: Store) -> None:
    for n in range(3):
        await finished(store, f"done-{n}", "completed")
    cutoff = datetime.now(UTC) + DAY
    assert await store.prune(older_than=cutoff, statuses=["completed"], limit=2) == 2
    assert await left(store) == {"done-2"}
    with pytest.raises(ConfigurationError, match="only finished executions go"):
        await store.prune(older_than=cutoff, statuses=["paused"])  # type: ignore[list-item]
    with pytest.raises(ConfigurationError, match="prune at least 1"):
        await store.prune(older_than=cutoff, limit=0)
    assert await left(store) == {"done-2"}


async def test_runs_go_on_while_it_prunes(store: Store) -> None:
    for n in range(4):
        await finished(store, f"done-{n}", "completed")
    reached, go = anyio.Event(), anyio.Event()

    async def hold(state: dict[str, Any]) -> dict[str, Any]:
        reached.set()
        await go.wait()
        return {"held": True}

    chain = Chain("hold", [hold], store=store)
    async with anyio.create_task_group() as tg:
        results: list[Any] = []

        async def run() -> None:
            results.append(await chain.run({}, execution_id="live"))

        tg.start_soon(run)
        await reached.wait()
        assert await Retention(completed=DAY, batch=1).apply(store, now=later(2)) == 4
        go.set()
    assert results[0].status == "completed"
    assert await left(store) == {"live"}


async def test_a_worker_applies_its_policy(store: Store) -> None:
    for n in range(3):
        await finished(store, f"done-{n}", "completed")
    chain = Chain("job", [lambda state: {"done": True}], store=store)
    async with ExecutionWorker(store, [chain], notify=False, clock=later(31),
                               retention=Retention(completed=30 * DAY)) as worker:
        await worker.serve(until_idle=True)
    assert await left(store) == set()


@pytest.mark.parametrize("options", [{"completed": timedelta(0)}, {"failed": -DAY}, {"every": timedelta(0)},
                                     {"batch": 0}, {"completed": 30}])
def test_bad_policies_are_refused(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        Retention(**options)
