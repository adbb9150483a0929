"""Cancel and deadlines: an execution stopped from outside, wherever it runs or waits."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from pydantic import BaseModel
from tether.runtime import (
    Actor,
    Resume,
    Runtime,
    Start,
    call_scope,
    cancel,
    interrupt,
    shielded,
)
from tether.stores import ConfigurationError, ExecutionFinished, ExecutionNotFound, Store

from tests.conftest import make_store

if TYPE_CHECKING:
    from pathlib import Path

NOTES: list[str] = []
GATES: dict[str, anyio.Event] = {}
"""Events the blocking job waits on, by name: set by the test, never by time."""


class Job(Actor[BaseModel]):
    """Blocks in its 'tool' until the test lets it go; approves big amounts first."""

    kind = "job"

    async def receive(self, message: Start) -> Any:
        request = message.input
        assert isinstance(request, dict)
        if request.get("approve"):
            with call_scope("tool:approve"):
                interrupt("approval", {"amount": 50_000})
        NOTES.append("started")
        GATES["started"].set()
        try:
            if request.get("shielded"):
                with shielded():
                    await GATES["shield"].wait()
                    NOTES.append("shielded block finished")
            await GATES["forever"].wait()
        finally:
            NOTES.append("tool ended")
        self.context.finish("done")


@pytest.fixture(autouse=True)
def _fresh() -> None:
    NOTES.clear()
    GATES.clear()
    for name in ("started", "shield", "forever"):
        GATES[name] = anyio.Event()


async def _verdict(store: Store, execution_id: str) -> Any:
    [last] = (await store.read_journal(execution_id))[-1:]
    return last.label, last.payload


async def test_a_running_execution_is_cancelled_from_the_same_store(store: Store) -> None:
    async with Runtime(store) as rt, anyio.create_task_group() as tg:
        results: list[Any] = []

        async def run() -> None:
            results.append(await rt.run(Job, {}, execution_id="job"))

        tg.start_soon(run)
        await GATES["started"].wait()
        cancelled = await cancel(store, "job", reason="customer withdrew", by="test:alice")
    assert cancelled.status == "cancelled"
    assert results[0].status == "cancelled"
    assert NOTES == ["started", "tool ended"]
    assert await _verdict(store, "job") == ("cancelled", {"by": "test:alice", "reason": "customer withdrew"})
    assert (await store.get_execution("job")).error == "Cancelled by test:alice: customer withdrew"


async def test_a_running_execution_is_cancelled_through_another_store_object(
    request: pytest.FixtureRequest, tmp_path: Path, db_store: Store
) -> None:
    # As another process would: its own connection, so the holder is told by the database
    # (Postgres NOTIFY) or sees it at its next renewal (SQLite, a third of this short lease).
    kind = "sqlite" if "sqlite" in repr(db_store).lower() else "postgres"
    async with make_store(kind, tmp_path, request) as other, Runtime(db_store, lease_seconds=0.6) as rt, \
            anyio.create_task_group() as tg:
        results: list[Any] = []

        async def run() -> None:
            results.append(await rt.run(Job, {}, execution_id="far"))

        tg.start_soon(run)
        await GATES["started"].wait()
        cancelled = await cancel(other, "far", reason="from afar")
    assert cancelled.status == results[0].status == "cancelled"
    label, payload = await _verdict(db_store, "far")
    assert (label, payload["reason"]) == ("cancelled", "from afar")
    assert payload["by"].startswith("python:")


async def test_a_shielded_block_reaches_its_end_before_the_cancel(store: Store) -> None:
    async with Runtime(store) as rt, anyio.create_task_group() as tg:
        results: list[Any] = []

        async def run() -> None:
            results.append(await rt.run(Job, {"shielded": True}, execution_id="shield"))

        async def cancel_it() -> None:
            results.append(await cancel(store, "shield"))

        tg.start_soon(run)
        await GATES["started"].wait()
        tg.start_soon(cancel_it)
        while (await store.get_execution("shield")).cancel is None:  # the request is recorded
            await anyio.lowlevel.checkpoint()
        assert NOTES == ["started"]  # the block holds the cancel back
        GATES["shield"].set()
    assert [r.status for r in results] == ["cancelled", "cancelled"]
    assert NOTES == ["started", "shielded block finished", "tool ended"]


async def test_a_paused_execution_is_cancelled_and_a_later_decision_refused(store: Store) -> None:
    async with Runtime(store) as rt:
        paused = await rt.run(Job, {"approve": True}, execution_id="wait")
        assert paused.status == "paused"
        cancelled = await cancel(store, "wait", reason="too late")
        assert cancelled.status == "cancelled"
        assert await store.count_pending(execution_id="wait") == 0
        with pytest.raises(ExecutionFinished, match="cancelled"):
            await rt.resume(Job, "wait", Resume(approved=True))
        again = await cancel(store, "wait", reason="twice")  # a second canceller is told the same
    assert again.status == "cancelled"
    assert await _verdict(store, "wait") == ("cancelled", {"by": cancelled_by(), "reason": "too late"})


def cancelled_by() -> str:
    import getpass

    return f"python:{getpass.getuser()}"


async def test_a_queued_execution_is_cancelled_before_it_starts(store: Store) -> None:
    async with Runtime(store) as rt:
        queued = await rt.enqueue(Job, {}, execution_id="later")
        assert queued.status == "queued"
        assert (await cancel(store, "later")).status == "cancelled"
        assert (await rt.run(Job, {}, execution_id="later")).status == "cancelled"
    assert NOTES == []


async def test_cancel_leaves_a_finished_execution_as_it_is(store: Store) -> None:
    GATES["forever"].set()
    async with Runtime(store) as rt:
        done = await rt.run(Job, {}, execution_id="done")
    assert done.status == "completed"
    journal = await store.read_journal("done")
    assert (await cancel(store, "done")).status == "completed"
    assert await store.read_journal("done") == journal
    assert (await store.get_execution("done")).cancel is None


async def test_cancel_of_an_unknown_execution_records_nothing(store: Store) -> None:
    with pytest.raises(ExecutionNotFound, match="nobody"):
        await cancel(store, "nobody")
    assert await store.list_executions() == []


async def test_a_cancel_without_waiting_returns_while_it_stops(store: Store) -> None:
    async with Runtime(store) as rt, anyio.create_task_group() as tg:
        results: list[Any] = []

        async def run() -> None:
            results.append(await rt.run(Job, {"shielded": True}, execution_id="nowait"))

        tg.start_soon(run)
        await GATES["started"].wait()
        asked = await cancel(store, "nowait", wait=0)
        assert asked.status == "running"  # the shielded block holds it
        GATES["shield"].set()
    assert results[0].status == "cancelled"


async def _race(store: Store, execution_id: str) -> dict[str, str]:
    """Resume and cancel one paused execution at once; what each caller was told."""
    told: dict[str, str] = {}
    async with Runtime(store) as rt:
        assert (await rt.run(Job, {"approve": True}, execution_id=execution_id)).status == "paused"

        async def resume() -> None:
            try:
                told["resume"] = (await rt.resume(Job, execution_id, Resume(approved=True))).status
            except ExecutionFinished as refused:
                told["resume"] = f"refused {refused.status}"

        async def cancel_it() -> None:
            told["cancel"] = (await cancel(store, execution_id)).status

        async with anyio.create_task_group() as tg:
            tg.start_soon(resume)
            tg.start_soon(cancel_it)
    return told


async def test_cancel_racing_resume_has_one_outcome(store: Store) -> None:
    # Whichever comes first, both callers are told the same story, twenty times over.
    GATES["forever"].set()
    for attempt in range(20):
        told = await _race(store, f"race-{attempt}")
        final = (await store.get_execution(f"race-{attempt}")).status
        assert final in ("cancelled", "completed"), told
        assert told["cancel"] == final, told
        assert told["resume"] in (final, f"refused {final}"), told


# -- deadlines -----------------------------------------------------------------------


async def test_a_run_past_its_deadline_times_out(store: Store) -> None:
    async with Runtime(store) as rt:
        result = await rt.run(Job, {}, execution_id="slow", timeout=timedelta(milliseconds=200))
    assert result.status == "timed_out"
    assert NOTES == ["started", "tool ended"]
    label, payload = await _verdict(store, "slow")
    assert label == "timed_out"
    assert datetime.fromisoformat(payload["deadline"]) == (await store.get_execution("slow")).deadline


async def test_a_deadline_that_passes_while_paused_fires_at_the_next_take_up(store: Store) -> None:
    start = datetime.now(UTC)
    async with Runtime(store, clock=lambda: start) as rt:
        paused = await rt.run(Job, {"approve": True}, execution_id="late", timeout=timedelta(hours=1))
    assert paused.status == "paused"
    execution = await store.get_execution("late")
    assert execution.wake_at == execution.deadline == start + timedelta(hours=1)
    # Every process stopped; the next one comes after the deadline.
    async with Runtime(store, clock=lambda: start + timedelta(hours=2)) as rt:
        result = await rt.resume(Job, "late")
    assert result.status == "timed_out"
    assert await store.count_pending(execution_id="late") == 0


async def test_a_worker_ends_a_paused_execution_at_its_deadline(store: Store) -> None:
    # Started two hours ago with a one-hour timeout: due for workers at once.
    earlier = datetime.now(UTC) - timedelta(hours=2)
    async with Runtime(store, clock=lambda: earlier) as rt:
        await rt.run(Job, {"approve": True}, execution_id="due", timeout=timedelta(hours=1))
    # What a worker does (tether worker): take what is due, and drive it.
    [lease] = await store.take_work(owner="worker", lease_seconds=30, limit=10)
    assert lease.deadline == earlier + timedelta(hours=1)
    async with Runtime(store) as rt:
        assert (await rt.drive(Job, lease)).status == "timed_out"


async def test_a_timeout_must_be_positive(store: Store) -> None:
    async with Runtime(store) as rt:
        with pytest.raises(ConfigurationError, match="not positive"):
            await rt.run(Job, {}, execution_id="never", timeout=0)
    assert await store.get_execution("never") is None
