"""A durable actor's journal: its inbox, what each message changed, and its lease."""

from __future__ import annotations

import os
import uuid
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import BaseModel, ValidationError
from tether.stores import (
    ConfigurationError,
    JournalEntry,
    Lease,
    NewEntry,
    NewExecution,
    SerializationError,
    Store,
)

from . import _delta

if TYPE_CHECKING:
    from collections.abc import Sequence

PROCESS_OWNER = f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
"""This process's identity as a lease owner."""


class MessageCodec:
    """Messages as JSON, read back only as one of the types an actor declares."""

    def __init__(self, path: str, types: Sequence[type[BaseModel]]) -> None:
        self._path = path
        self._types = {t.__name__: t for t in types}

    def encode(self, message: Any) -> dict[str, Any]:
        if not isinstance(message, BaseModel) or type(message).__name__ not in self._types:
            raise ConfigurationError(
                f"Durable actor {self._path!r} cannot journal {message!r}: durable messages must "
                f"be instances of the pydantic models listed in its 'messages' "
                f"({sorted(self._types) or 'none declared'})."
            )
        return {"type": type(message).__name__, "data": message.model_dump(mode="json")}

    def decode(self, body: dict[str, Any]) -> BaseModel:
        return self._types[body["type"]].model_validate(body["data"])


class ActorJournal:
    """Writes one durable actor's boundaries under its execution's lease.

    Entries, all at the actor's path:

    - ``inbox``: a message accepted into the mailbox, ``{"message": ...}``;
    - ``msg:N``: message N handled, ``{"inbox": seq, "delta": ...}``;
    - ``snapshot``: every ``snapshot_every`` messages, the state's non-list fields.
    """

    def __init__(self, store: Store, lease: Lease, path: str, codec: MessageCodec,
                 snapshot_every: int) -> None:
        self.store = store
        self.lease = lease
        self.path = path
        self.codec = codec
        self.snapshot_every = snapshot_every
        self.handled = 0

    @classmethod
    async def open(cls, store: Store, execution_id: str, path: str, runner: str, codec: MessageCodec,
                   *, owner: str, lease_seconds: float, snapshot_every: int) -> ActorJournal:
        """Create or take over the actor's execution and hold its lease.

        Raises:
            LeaseHeld: Another live process runs this actor.
        """
        started = await store.start_execution(
            NewExecution(execution_id=execution_id, runner=runner, root_path=path),
            owner=owner, lease_seconds=lease_seconds,
        )
        lease = started.lease or await store.acquire_lease(
            execution_id, owner=owner, lease_seconds=lease_seconds
        )
        return cls(store, lease, path, codec, snapshot_every)

    async def record_inbox(self, message: Any) -> int:
        entry = NewEntry(path=self.path, label="inbox", payload={"message": self.codec.encode(message)})
        [seq] = await self.store.append(self.lease, [entry])
        return seq

    async def record_handled(self, inbox_seq: int | None, delta: dict[str, Any],
                             state: dict[str, Any]) -> None:
        self.handled += 1
        entries = [NewEntry(path=self.path, label=f"msg:{self.handled}",
                            payload={"inbox": inbox_seq, "delta": delta})]
        if self.handled % self.snapshot_every == 0:
            entries.append(NewEntry(path=self.path, label="snapshot", kind="snapshot",
                                    payload=_delta.snapshot(state)))
        try:
            await self.store.append(self.lease, entries)
        except SerializationError:
            self.handled -= 1
            raise

    async def load(self, initial: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[int, BaseModel]]]:
        """Return the actor's state and the journaled messages it never handled, in order."""
        history: list[tuple[str, dict[str, Any]]] = [("delta", {"set": initial})]
        inbox: dict[int, BaseModel] = {}
        handled_count = 0
        for entry in await self._entries():
            payload: Any = entry.payload
            if entry.label == "inbox":
                try:
                    inbox[entry.seq] = self.codec.decode(payload["message"])
                except (KeyError, ValidationError):
                    continue  # a message type this version no longer declares
            elif entry.kind == "snapshot":
                history.append(("snapshot", payload))
            elif entry.label.startswith("msg:"):
                handled_count += 1
                history.append(("delta", payload["delta"]))
                inbox.pop(payload["inbox"], None)
        self.handled = handled_count
        return _delta.restore(history), sorted(inbox.items())

    async def _entries(self) -> list[JournalEntry]:
        entries = await self.store.read_journal(self.lease.execution_id)
        return [e for e in entries if e.path == self.path]

    async def keep_lease(self, lease_seconds: float) -> None:
        """Renew the lease until cancelled; raises `StaleLease` if it was taken over."""
        while True:
            await anyio.sleep(lease_seconds / 3)
            self.lease = await self.store.renew_lease(self.lease, lease_seconds=lease_seconds)

    async def release(self) -> None:
        await self.store.release_lease(self.lease)
