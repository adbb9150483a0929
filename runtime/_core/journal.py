"""A durable actor's journal: its inbox, what each message changed, and its lease."""

from __future__ import annotations

import contextlib
import getpass
import logging
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import BaseModel, ValidationError
from tether.stores import (
    ConfigurationError,
    DuplicateInterrupt,
    Lease,
    LeaseHeld,
    NewEntry,
    NewExecution,
    NewInterrupt,
    SerializationError,
    Store,
    StoreError,
)

from . import delta as _delta, telemetry
from .interrupt import Answer, content_digest
from .owners import is_dead

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import timedelta

    from tether.stores import JournalEntry

    from .hooks import Hooks


log = logging.getLogger("tether.runtime")


@dataclass(frozen=True)
class Carried:
    """A durable step answered without the store (`patched`), written with the actor's next boundary."""

    inbox_seq: int | None
    label: str
    key: str
    result: Any


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


async def take_lease(
    store: Store, execution_id: str, *, owner: str, lease_seconds: float, path: str, force: bool = False
) -> Lease:
    """Acquire an execution's lease, taking it over at once from an owner that provably died.

    A live owner, or one whose death cannot be proven (another machine, another
    pid namespace), is waited out: `LeaseHeld`, as from the store, unless
    ``force``. A takeover before expiry is journaled at ``path``: from whom, by
    whom, and whether it was forced (then with the operator's user name).

    Raises:
        LeaseHeld: Held by a live owner (or one that cannot be judged), and not ``force``.
        ExecutionFinished, ExecutionNotFound: As from `Store.acquire_lease`.
    """
    try:
        return await store.acquire_lease(execution_id, owner=owner, lease_seconds=lease_seconds)
    except LeaseHeld as held:
        dead = is_dead(held.owner)
        if not (force or dead):
            raise
        previous = held.owner
    lease = await store.acquire_lease(execution_id, owner=owner, lease_seconds=lease_seconds, replacing=previous)
    telemetry.took_over(dead=dead, forced=force)
    log.warning("took over execution %s from %s (%s)", execution_id, previous, "forced" if force else "dead",
                extra={"execution_id": execution_id, "agent_path": path})
    why: dict[str, Any] = {"from": previous, "by": owner, "dead": dead, "forced": force}
    if force:
        why["operator"] = operator_name()
    try:
        await store.append(lease, [NewEntry(path=path, label="takeover", payload=why)])
    except BaseException:
        # Untold, the takeover does not happen: give the lease back, or every other process
        # would wait it out (this owner is alive, so nobody could prove it dead).
        with anyio.CancelScope(shield=True), contextlib.suppress(StoreError):
            await store.release_lease(lease)
        raise
    return lease


def operator_name() -> str:
    """Who runs this process, for the journal of a forced takeover."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no name for this uid (a container, say)
        return "unknown"


class LeaseHolder:
    """One execution's lease, shared by every actor that journals into it.

    Renewal replaces the lease object, so actors read it from here at each write.
    """

    def __init__(self, store: Store, lease: Lease, journal: list[JournalEntry] | None = None) -> None:
        self.store: Store = store
        self.lease: Lease = lease
        self.renewing: bool = False
        """A renewal is in flight (between renewals the keeper only waits)."""
        self.journal: list[JournalEntry] | None = journal
        """The execution's journal as read when its lease was taken, while nothing has been
        written since: the actors restoring then read it from here, not each from the store."""
        self.suspended: list[str] = []
        """The calls that suspended in this drive of the execution, in order: what its pause waits for."""
        self.reusing: bool = False
        """A fork that reuses the original's side effects: every call looks for a record,
        also in a message it handles for the first time (see `tether.runtime.fork`)."""
        self.closing: list[NewEntry] = []
        """The root's last boundary, the one that finished the execution: written with the
        release that records the outcome, in its one transaction (a commit saved per run)."""
        self.journals: list[ActorJournal] = []
        """Every actor journal writing under this lease, for the steps they still carry."""

    def wrote(self) -> None:
        """Something was journaled: the journal read up front is no longer all of it."""
        self.journal = None

    def unwritten(self) -> list[NewEntry]:
        """The steps the tree's actors still carry, taken from them: for the verdict of a run that stopped.

        A failed run may be retried: what its steps did must be on record for the retry.
        """
        return [entry for journal in self.journals for entry in journal._with_carried([])]

    async def keep(self, lease_seconds: float, until: anyio.Event | None = None) -> None:
        """Renew the lease every third of its length, until ``until`` is set or until cancelled.

        Ending on the event costs no cancellation (anyio describes the current task
        on every cancel). Raises `StaleLease` if the lease was taken over.
        """
        while True:
            if until is None:
                await anyio.sleep(lease_seconds / 3)
            else:
                with anyio.move_on_after(lease_seconds / 3):
                    await until.wait()
                if until.is_set():
                    return
            self.renewing = True
            try:
                self.lease = await self.store.renew_lease(self.lease, lease_seconds=lease_seconds)
            finally:
                self.renewing = False


@dataclass
class Loaded:
    """What a durable actor restores from its journal."""

    state: dict[str, Any]
    unhandled: list[tuple[int, BaseModel, str | None]]
    """Messages accepted but never handled: (inbox seq, message, ask id), in order."""
    decisions: dict[int, dict[str, list[Answer]]]
    """Resume decisions per unhandled inbox seq: call path -> decisions, oldest first."""
    steps: dict[int, dict[str, Any]]
    """Results of durable steps per unhandled inbox seq: step key -> result."""
    finished: tuple[bool, Any] = (False, None)
    """Whether an execution's root finished, and with what output."""
    suspended: dict[int, list[str]] = field(default_factory=dict)
    """The call paths each unhandled inbox seq suspended at, decided or not, in journal order."""


class ActorJournal:
    """Writes one durable actor's boundaries under its execution's lease.

    Entries, all at the actor's path:

    - ``inbox``: a message accepted into the mailbox, ``{"message": ..., "id": ...}``
      (``id`` names an ``ask`` made while another durable actor handled a message);
    - ``msg:N``: message N handled, ``{"inbox": seq, "delta": ..., "reply": ...}``;
    - ``snapshot``: every ``snapshot_every`` messages, and at suspension, the
      state's non-list fields;
    - ``suspended``: the handler called ``interrupt()``, ``{"inbox": seq, "path": ...}``
      (the store writes it with the snapshot and the pending row in one transaction).
    """

    def __init__(self, holder: LeaseHolder, path: str, codec: MessageCodec, snapshot_every: int,
                 hooks: Hooks) -> None:
        self.holder = holder
        self.hooks = hooks
        self.store: Store = holder.store
        self.path = path
        self.codec = codec
        self.snapshot_every = snapshot_every
        self.handled: int = 0
        self.accepted: int = 0
        """Messages accepted into the mailbox so far (``inbox`` entries), as loaded and since."""
        self.asks: dict[str, tuple[int, bool, Any]] = {}
        """Ask id -> (inbox seq, handled?, reply): a repeated ask finds its first answer."""
        self._ids: dict[int, str] = {}
        self._carried: list[Carried] = []
        self._carrying = threading.Lock()  # `carry` may be called from a worker thread
        holder.journals.append(self)

    @property
    def lease(self) -> Lease:
        return self.holder.lease

    @classmethod
    async def open(cls, store: Store, execution_id: str, path: str, runner: str, codec: MessageCodec,
                   *, owner: str, lease_seconds: float, snapshot_every: int, hooks: Hooks) -> ActorJournal:
        """Create or take over a standalone durable actor's execution and hold its lease.

        Raises:
            LeaseHeld: Another live process runs this actor (one that died on this
                machine is taken over at once).
        """
        started = await store.start_execution(
            NewExecution(execution_id=execution_id, runner=runner, root_path=path),
            owner=owner, lease_seconds=lease_seconds,
        )
        lease = started.lease or await take_lease(
            store, execution_id, owner=owner, lease_seconds=lease_seconds, path=path
        )
        return cls(LeaseHolder(store, lease), path, codec, snapshot_every, hooks)

    def carry(self, step: Carried) -> None:
        """Journal ``step`` with the next boundary this actor writes (safe from a worker thread).

        Until then a crash loses it, and nothing the call did after it is
        journaled either: the call, made again, comes to the same answer.
        """
        with self._carrying:
            self._carried.append(step)

    def _with_carried(self, entries: list[NewEntry]) -> list[NewEntry]:
        if not self._carried:
            return entries
        with self._carrying:
            carried, self._carried = self._carried, []
        return [NewEntry(path=self.path, label=c.label,
                         payload={"inbox": c.inbox_seq, "step": c.key, "result": c.result}) for c in carried] + entries

    async def record_inbox(self, message: Any, ask_id: str | None) -> int:
        payload: dict[str, Any] = {"message": self.codec.encode(message), "id": ask_id}
        entries = self._with_carried([NewEntry(path=self.path, label="inbox", payload=payload)])
        self.holder.wrote()
        seq = (await self.store.append(self.lease, entries))[-1]
        self.accepted += 1
        self.hooks.faults.wrote(entries)
        if ask_id is not None:
            self.asks[ask_id] = (seq, False, None)
            self._ids[seq] = ask_id
        return seq

    async def record_handled(self, inbox_seq: int | None, delta: dict[str, Any],
                             state: dict[str, Any], reply: Any,
                             finish: tuple[bool, Any] = (False, None)) -> None:
        ask_id = self._ids.get(inbox_seq) if inbox_seq is not None else None
        payload: dict[str, Any] = {"inbox": inbox_seq, "delta": delta}
        if ask_id is not None:
            payload["reply"] = reply
        if finish[0]:
            # An execution's output, with the boundary that produced it: a process that dies
            # before releasing the lease leaves a run the next recovery completes at once.
            payload["finish"] = {"output": finish[1]}
        self.handled += 1
        entries = self._with_carried([NewEntry(path=self.path, label=f"msg:{self.handled}", payload=payload)])
        if self.handled % self.snapshot_every == 0:
            entries.append(self._snapshot(state))
        if finish[0] and ask_id is None:
            # Nothing waits for this boundary but the outcome, so it goes with the outcome:
            # lost only with it, when the message is handled again as after any crash.
            self.holder.closing = entries
            return
        try:
            self.holder.wrote()
            await self.store.append(self.lease, entries)
        except SerializationError:
            self.handled -= 1
            raise
        self.hooks.faults.wrote(entries)
        if ask_id is not None:
            self.asks[ask_id] = (inbox_seq, True, reply)  # type: ignore[assignment]

    async def record_suspension(self, inbox_seq: int | None, state: dict[str, Any], path: str,
                                reason: str, context: Any, expect: str, patience: timedelta | None = None,
                                default: Any = None) -> None:
        # What was asked is journaled with the suspension: the call that asks it again on
        # replay is the one its decision goes to.
        asked: dict[str, Any] = {"inbox": inbox_seq, "path": path, "expect": expect, "reason": reason,
                 "context": content_digest(context)}
        entries = self._with_carried(
            [self._snapshot(state), NewEntry(path=self.path, label="suspended", kind="suspended", payload=asked)])
        deadline = None if patience is None else self.hooks.now() + patience
        interrupt = NewInterrupt(path=path, reason=reason, context=context, deadline=deadline, default=default)
        try:
            self.holder.wrote()
            await self.store.suspend(self.lease, entries, interrupt)
        except DuplicateInterrupt:
            pass  # still pending from before: handled again, it asks again for the same decision
        else:
            self.hooks.faults.wrote(entries)
        self.holder.suspended.append(path)

    async def record_step(self, inbox_seq: int | None, label: str, key: str, result: Any) -> None:
        payload = {"inbox": inbox_seq, "step": key, "result": result}
        entries = self._with_carried([NewEntry(path=self.path, label=label, payload=payload)])
        self.holder.wrote()
        await self.store.append(self.lease, entries)
        self.hooks.faults.wrote(entries)

    async def release(self) -> None:
        """Give up a standalone durable actor's lease (it stays ``running``, unheld)."""
        await self.store.release_lease(self.lease)

    def _snapshot(self, state: dict[str, Any]) -> NewEntry:
        return NewEntry(path=self.path, label="snapshot", kind="snapshot", payload=_delta.snapshot(state))

    async def load(self, initial: dict[str, Any]) -> Loaded:
        """Rebuild the state, the unhandled messages and their resume decisions."""
        history: list[tuple[str, dict[str, Any]]] = [("delta", {"set": initial})]
        inbox: dict[int, tuple[BaseModel, str | None]] = {}
        suspensions: dict[int, tuple[int, Any, Any]] = {}   # suspended entry seq -> (inbox seq, reason, context)
        decisions: dict[int, dict[str, list[Answer]]] = {}
        steps: dict[int, dict[str, Any]] = {}
        suspended: dict[int, list[str]] = {}
        self.asks.clear()
        self._ids.clear()
        handled_count = accepted = 0
        finished: dict[str, Any] | None = None
        mine = self.path + "/"
        journal = self.holder.journal  # read up front, if nothing was written since
        if journal is None:
            journal = await self.store.read_journal(self.lease.execution_id)
        for entry in journal:
            payload: Any = entry.payload
            if entry.label == "fork" and isinstance(payload, dict) and payload.get("effects") == "reuse":
                self.holder.reusing = True
            if entry.kind == "resumed":
                # A decision for a call of mine (at my path or below it, but for one of
                # my own suspensions: a child's share the prefix, not the seq).
                origin = suspensions.get(payload.get("suspended_seq"))
                if origin is not None and (entry.path == self.path or entry.path.startswith(mine)):
                    inbox_seq, reason, context = origin
                    decisions.setdefault(inbox_seq, {}).setdefault(entry.path, []).append(
                        Answer(payload["value"], reason, context))
                continue
            if entry.path != self.path:
                continue
            if entry.label == "inbox":
                accepted += 1
                try:
                    inbox[entry.seq] = (self.codec.decode(payload["message"]), payload.get("id"))
                except (KeyError, ValidationError):
                    continue  # a message type this version no longer declares
                if payload.get("id") is not None:
                    self.asks[payload["id"]] = (entry.seq, False, None)
                    self._ids[entry.seq] = payload["id"]
            elif entry.kind == "suspended":
                suspensions[entry.seq] = (payload["inbox"], payload.get("reason"), payload.get("context"))
                suspended.setdefault(payload["inbox"], []).append(str(payload.get("path", "")))
            elif entry.kind == "snapshot":
                history.append(("snapshot", payload))
            elif isinstance(payload, dict) and "step" in payload:
                # Keys are `Step.local_key`s. Older journals hold the full `Step.key_for`,
                # whose prefix only repeats the entry's execution, path and message.
                key = payload["step"].removeprefix(f"{self.lease.execution_id}|{self.path}|inbox:{payload['inbox']}|")
                steps.setdefault(payload["inbox"], {})[key] = payload["result"]
            elif entry.label.startswith("msg:"):
                handled_count += 1
                if "finish" in payload:
                    finished = payload["finish"]
                history.append(("delta", payload["delta"]))
                inbox.pop(payload["inbox"], None)
                decisions.pop(payload["inbox"], None)
                steps.pop(payload["inbox"], None)
                suspended.pop(payload["inbox"], None)
                ask_id = self._ids.get(payload["inbox"])
                if ask_id is not None:
                    self.asks[ask_id] = (payload["inbox"], True, payload.get("reply"))
        self.handled, self.accepted = handled_count, accepted
        unhandled = [(seq, message, ask_id) for seq, (message, ask_id) in sorted(inbox.items())]
        return Loaded(_delta.restore(history), unhandled, decisions, steps,
                      (False, None) if finished is None else (True, finished["output"]), suspended)
