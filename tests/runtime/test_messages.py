"""Messages into an execution: durable, in order, exactly once, wherever the execution is."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError
from tether.runtime import (
    Actor,
    ActorNotFound,
    Runtime,
    Start,
    idempotent,
    send_message,
    wait_for,
)
from tether.stores import ConfigurationError, ExecutionFinished, ExecutionNotFound, Store

EFFECTS: list[str] = []


class Approval(BaseModel):
    approved: bool
    by: str


class Note(BaseModel):
    text: str


@idempotent
async def book(what: str) -> str:
    EFFECTS.append(what)
    return what


class Desk(Actor[BaseModel]):
    """Books, then waits for as many approvals as its input asks, then a note (with a timeout)."""

    kind = "desk"

    async def receive(self, message: Start) -> Any:
        request = message.input if isinstance(message.input, dict) else {}
        await book("before")
        approvals = [await wait_for(Approval) for _ in range(request.get("approvals", 1))]
        note = await wait_for(Note, timeout=request["note_timeout"], default=Note(text="none")) \
            if "note_timeout" in request else None
        await book("after")
        self.context.finish({"by": [a.by for a in approvals if a], "note": note.text if note else None})


@pytest.fixture(autouse=True)
def _clean() -> None:
    EFFECTS.clear()


async def test_a_waiting_run_parks_and_a_message_continues_it(store: Store) -> None:
    async with Runtime(store) as rt:
        paused = await rt.run(Desk, {}, execution_id="m-1")
        assert (paused.status, paused.pending) == ("paused", [])
        [verdict] = (await store.read_journal("m-1"))[-1:]
        assert verdict.payload["waiting"] == [{"path": "desk:desk", "type": f"{__name__}:Approval"}]
        execution = await store.get_execution("m-1")
        assert execution.wake_at is None  # nothing to wake it for yet
        sent = await send_message(store, "m-1", Approval(approved=True, by="alice"), by="test")
        assert (sent.path, sent.label) == ("desk:desk", "message")
        assert (await store.get_execution("m-1")).wake_at is not None  # marked for workers
        done = await rt.resume(Desk, "m-1")
    assert (done.status, done.output) == ("completed", {"by": ["alice"], "note": None})
    assert EFFECTS == ["before", "after"]  # the code before the wait ran again, its effect did not


async def test_messages_are_taken_in_order_and_exactly_once(store: Store) -> None:
    async with Runtime(store) as rt:
        assert (await rt.run(Desk, {"approvals": 3}, execution_id="m-2")).status == "paused"
        for name in ("ann", "bob"):
            await send_message(store, "m-2", {"approved": True, "by": name})
        assert (await rt.resume(Desk, "m-2")).status == "paused"  # two of three: it waits again
        await send_message(store, "m-2", Approval(approved=False, by="cyd"))
        await send_message(store, "m-2", Approval(approved=True, by="dan"))  # one too many: stays unread
        done = await rt.resume(Desk, "m-2")
    assert done.output == {"by": ["ann", "bob", "cyd"], "note": None}


async def test_a_message_sent_before_the_wait_is_there_when_it_waits(store: Store) -> None:
    async with Runtime(store) as rt:
        await rt.enqueue(Desk, {}, execution_id="m-3")  # not started yet
        await send_message(store, "m-3", Approval(approved=True, by="early"))
        done = await rt.run(Desk, {}, execution_id="m-3")
    assert done.output == {"by": ["early"], "note": None}


async def test_a_timed_wait_returns_its_default(store: Store) -> None:
    start = datetime.now(UTC)
    async with Runtime(store, clock=lambda: start) as rt:
        await rt.run(Desk, {"note_timeout": 60}, execution_id="m-4")
        await send_message(store, "m-4", Approval(approved=True, by="eve"))
        waiting = await rt.resume(Desk, "m-4")  # now it waits for the note, a minute at most
    assert waiting.status == "paused"
    assert (await store.get_execution("m-4")).wake_at == start + timedelta(seconds=60)
    async with Runtime(store, clock=lambda: start + timedelta(minutes=2)) as rt:
        done = await rt.resume(Desk, "m-4")
    assert done.output == {"by": ["eve"], "note": "none"}


async def test_a_waiting_actor_refuses_what_it_does_not_accept(store: Store) -> None:
    async with Runtime(store) as rt:
        await rt.run(Desk, {}, execution_id="m-5")
    journal = await store.read_journal("m-5")
    with pytest.raises(ValidationError):
        await send_message(store, "m-5", Note(text="not an approval"))
    with pytest.raises(ConfigurationError, match="JSON object"):
        await send_message(store, "m-5", ["approved"])  # type: ignore[arg-type]
    with pytest.raises(ActorNotFound, match="desk:desk"):
        await send_message(store, "m-5", Approval(approved=True, by="x"), path="desk:other")
    with pytest.raises(ExecutionNotFound):
        await send_message(store, "nobody", Approval(approved=True, by="x"))
    assert await store.read_journal("m-5") == journal  # nothing was sent


async def test_a_finished_execution_takes_no_messages(store: Store) -> None:
    async with Runtime(store) as rt:
        await rt.run(Desk, {}, execution_id="m-6")
        await send_message(store, "m-6", Approval(approved=True, by="fay"))
        assert (await rt.resume(Desk, "m-6")).status == "completed"
    with pytest.raises(ExecutionFinished, match="completed"):
        await send_message(store, "m-6", Approval(approved=True, by="late"))


async def test_a_worker_takes_up_the_run_a_message_woke(store: Store) -> None:
    async with Runtime(store) as rt:
        await rt.run(Desk, {}, execution_id="m-7")
        assert await store.take_work(owner="worker", lease_seconds=30, limit=5) == []  # nothing to do yet
        await send_message(store, "m-7", Approval(approved=True, by="gus"))
        [lease] = await store.take_work(owner="worker", lease_seconds=30, limit=5)
        assert (await rt.drive(Desk, lease)).output == {"by": ["gus"], "note": None}
