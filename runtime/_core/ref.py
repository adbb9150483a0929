"""`ActorRef`: how anyone talks to an actor, across its restarts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, cast

import anyio
from typing_extensions import TypeVar

from . import telemetry
from .idempotent import current_step

if TYPE_CHECKING:
    from .supervision import Slot

# typing_extensions (a dependency of pydantic) gives the TypeVars defaults on Python < 3.13:
# a bare `ActorRef` or `Actor[State]` means `Any` for the message and the reply, as before.
MsgT_contra = TypeVar("MsgT_contra", contravariant=True, default=Any)
"""What an actor accepts: a ref that takes any `BaseModel` also serves where a `Deposit` is sent."""
ReplyT_co = TypeVar("ReplyT_co", covariant=True, default=Any)
"""What an actor's handler returns, and so what ``ask`` gives back."""
MsgT = TypeVar("MsgT", default=Any)
"""The message type, in signatures that carry it from a factory to a ref (`ActorContext.spawn`)."""
ReplyT = TypeVar("ReplyT", default=Any)
"""The reply type, in signatures that carry it from a factory to a ref."""


class Reply:
    """A one-shot answer to an ``ask``."""

    __slots__ = ("_done", "error", "value")

    def __init__(self) -> None:
        self._done = anyio.Event()
        self.value: Any = None
        self.error: BaseException | None = None

    def resolve(self, value: Any) -> None:
        if not self._done.is_set():
            self.value = value
            self._done.set()

    def fail(self, error: BaseException) -> None:
        if not self._done.is_set():
            self.error = error
            self._done.set()

    async def wait(self) -> Any:
        await self._done.wait()
        if self.error is not None:
            raise self.error
        return self.value


@dataclass
class Envelope:
    """A message in a mailbox, with where its reply goes."""

    message: Any
    reply: Reply | None = None
    inbox_seq: int | None = field(default=None)
    """For a durable actor: the journal entry that holds the message."""
    ask_id: str | None = field(default=None)
    """An ask made while a durable actor handled a message: the same call made again
    (its handler running again) gets the first one's answer instead of a second message."""
    replayed: bool = False
    """It may have been handled before (loaded from the journal, or handled again after a
    failure): only then can records of its side effects exist."""
    sender: object | None = field(default_factory=telemetry.capture)
    """The trace context it was sent in, while telemetry is on: its handling's span is a child of it."""


class ActorRef(Generic[MsgT_contra, ReplyT_co]):
    """A handle to an actor. It stays valid across the actor's restarts.

    Refs come from `Runtime.spawn` and `ActorContext.spawn`; they are never built by hand.
    The type arguments are the messages the actor takes and the reply ``ask`` returns,
    as its class declares them (``class AccountActor(Actor[Account, Deposit, int])``
    spawns an ``ActorRef[Deposit, int]``); both default to ``Any``, so a bare
    ``ActorRef`` takes and returns anything.

    A durable actor asked from another durable actor's handler replies with the
    JSON form of its return value (what its journal holds, so that the ask made
    again gets the same answer): declare a JSON reply type for such actors, or
    validate the reply (``Outcome.model_validate(await ref.ask(task))``).
    """

    __slots__ = ("_slot",)

    def __init__(self, slot: Slot) -> None:
        self._slot = slot

    def __repr__(self) -> str:
        return f"<ActorRef {self.path}>"

    @property
    def path(self) -> str:
        """The actor's full path, e.g. ``service:bank/account:42``."""
        return self._slot.path

    async def send(self, message: MsgT_contra) -> None:
        """Put a message in the actor's mailbox; wait while the mailbox is full.

        For a durable actor it returns once the message is in the journal: from
        then on it will be handled exactly once, whatever crashes.

        Raises:
            ActorStopped: The actor was stopped.
        """
        step = current_step.get()
        # Sent again when its sender's message is handled again: the id drops the repeat.
        send_id = step.key_for(f"send:{self.path}", message) if step is not None else None
        await self._slot.deliver(Envelope(message, ask_id=send_id))

    async def ask(self, message: MsgT_contra) -> ReplyT_co:
        """Send a message and wait for the handler's return value.

        To bound the wait, wrap it: ``with anyio.fail_after(5): await ref.ask(m)``.

        Raises:
            ActorCrashed: The handler raised; ``__cause__`` is its error.
            ActorStopped: The actor was stopped before it answered.
        """
        reply = Reply()
        step = current_step.get()
        ask_id = step.key_for(f"ask:{self.path}", message) if step is not None else None
        await self._slot.deliver(Envelope(message, reply, ask_id=ask_id))
        return cast("ReplyT_co", await reply.wait())

    async def stop(self) -> None:
        """Stop the actor after its current message, and its children first.

        Messages still in its mailbox are dropped (a durable actor's stay in its
        journal). Stopping a stopped actor does nothing.
        """
        await self._slot.stop()
