"""Messages into an execution: `wait_for` in a node or a tool, fed by ``send_message`` from anywhere.

A message is durable the moment it is sent: the store journals it at the
receiving actor's path, in order. ``await wait_for(Approval)`` takes the oldest
message there that is an ``Approval`` and no earlier ``wait_for`` took, and
journals which one it took, so a replay after a crash gets the same message and
no message is ever taken twice. When none has come yet, the execution parks
(no task, no lease held) until one does: the store marks it for workers as the
message arrives, in whatever process it is sent.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError
from tether.stores import ConfigurationError, UsageError

from .idempotent import current_step
from .interrupt import Suspension, current_call, model_name

if TYPE_CHECKING:
    from tether.stores import JournalEntry

M = TypeVar("M", bound=BaseModel)


class Awaiting(Suspension):
    """Raised by `wait_for` when no message has come yet; the runtime parks the run. Do not catch it."""

    def __init__(self, path: str, expect: str, due: datetime | None, seen: int) -> None:
        super().__init__(f"{path} waits for a {expect} message")
        self.path = path
        self.expect = expect
        self.due = due
        """When its timeout gives up waiting (None: never)."""
        self.seen = seen
        """The last journal entry it read: a message after it is one it has not seen."""


async def wait_for(message_type: type[M], *, timeout: timedelta | float | None = None,
                   default: M | None = None) -> M | None:
    """Wait, durably, for a message of ``message_type`` sent to this actor (`send_message`).

    Call it in a node, a tool, or a handler of a durable actor of an execution.
    It returns the oldest such message not taken yet; each message is taken by
    one ``wait_for`` only, and a replay (after a crash, or a resume) gets the same
    one again. When none has come, the execution parks, like `interrupt()`: the
    run returns ``paused``, no task or lease is held, and the message, whenever
    and from wherever it is sent, wakes it up (a worker, or the next
    ``resume``, continues it). The code before the call runs again then.

    Args:
        message_type: The pydantic model the message must validate as; messages
            sent while this call waits are checked against it before they are accepted.
        timeout: How long to wait, durably (fixed the first time it waits), after
            which it returns ``default``.
        default: What a timed-out wait returns.

    Raises:
        UsageError: Not inside a durable actor of an execution.
    """
    step = current_step.get()
    if step is None or current_call.get() is None:
        raise UsageError(
            "wait_for() waits durably for a message: call it while a durable actor of Runtime.run(...) "
            "handles a message (a node, a tool, or the handler). Use an anyio memory stream otherwise."
        )
    expect = model_name(message_type)
    key = step.local_key("wait_for", expect)
    if key in step.recorded:
        step.replayed.add(key)
        return _answer(message_type, step.recorded[key], default)
    journal = step.journal
    clock = journal.hooks.now
    due: datetime | None = None
    if timeout is not None:
        span = timeout if isinstance(timeout, timedelta) else timedelta(seconds=timeout)
        if span <= timedelta(0):
            raise ConfigurationError(f"wait_for(..., timeout={timeout!r}) is not positive: give it time to wait.")
        due_key = step.local_key("wait_for_due", expect)
        if due_key in step.recorded:
            step.replayed.add(due_key)
            due = datetime.fromisoformat(step.recorded[due_key])
        else:
            due = clock() + span
            await journal.record_step(step.inbox_seq, "wait_for_due", due_key, due.isoformat())
    entries = await journal.store.read_journal(journal.lease.execution_id)
    found = _first_untaken(entries, journal.path, message_type)
    if found is not None:
        seq, message = found
        await journal.record_step(step.inbox_seq, "wait_for", key,
                                  {"seq": seq, "message": message.model_dump(mode="json")})
        return message
    if due is not None and clock() >= due:
        await journal.record_step(step.inbox_seq, "wait_for", key, {"seq": None, "message": None})
        return default
    raise Awaiting(journal.path, expect, due, entries[-1].seq if entries else 0)


def _answer(message_type: type[M], recorded: Any, default: M | None) -> M | None:
    """What a recorded ``wait_for`` returns again: the message it took, or its default after a timeout."""
    message = recorded.get("message") if isinstance(recorded, dict) else None
    return default if message is None else message_type.model_validate(message)


def _first_untaken(entries: list[JournalEntry], path: str, message_type: type[M]) -> tuple[int, M] | None:
    """The oldest message at ``path`` that validates as ``message_type`` and no ``wait_for`` took, and its seq."""
    taken = set()
    for entry in entries:
        payload: Any = entry.payload
        if entry.label == "wait_for" and isinstance(payload, dict) and isinstance(payload.get("result"), dict):
            taken.add(payload["result"].get("seq"))
    for entry in entries:
        payload = entry.payload
        if entry.label != "message" or entry.path != path or entry.seq in taken or not isinstance(payload, dict):
            continue
        try:
            return entry.seq, message_type.model_validate(payload.get("message"))
        except ValidationError:
            continue  # another kind of message: left for the wait that wants it
    return None
