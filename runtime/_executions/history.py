"""An execution's boundaries, and forks that start a new execution from one of them.

Every boundary of an execution is an entry of its journal: a message accepted,
a step (a node, an LLM turn, a tool call) with its result, a suspension, a
decision, a message handled. `history` lists them with the state of the actor
that wrote each, as of that entry. `fork` copies the journal up to one of them
into a new execution, which then continues from there exactly as a run
recovered after a crash at that point: what the prefix holds is not done again,
what comes after is.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

import anyio
from tether.runtime._core import delta
from tether.runtime._core.events import FINAL_VERDICTS, verdict_of
from tether.runtime._core.hooks import installed, names
from tether.runtime._core.idempotent import ask_alias
from tether.runtime._core.interrupt import Resume, loaded_model
from tether.runtime._core.journal import take_lease
from tether.runtime._core.owners import process_owner, tag
from tether.stores import (
    ConfigurationError,
    ExecutionNotFound,
    JournalEntry,
    NewExecution,
    StoreError,
)

from .service import FORKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pydantic import JsonValue
    from tether.stores import Execution, Store

_UNSET: Any = object()
"""``update`` not given (None is an update: a step whose result becomes null)."""


@dataclass(frozen=True)
class Boundary:
    """One boundary of an execution, as `history` gives it.

    Attributes:
        seq: Its place in the journal (1, 2, ...): what ``fork(at=...)`` takes.
        path: The actor (or call) that wrote it, e.g. ``chain:refund``.
        label: What it was: ``inbox``, ``node:charge``, ``turn:2``, ``msg:1``, ``suspended``.
        kind: ``entry``, ``snapshot``, ``suspended`` or ``resumed``.
        at: When it was committed.
        value: What it holds: a step's result, the message accepted, the decision
            taken, the reply and output of a message handled.
        state: The state of the actor at ``path`` as of this boundary: the fields
            its journal set, from snapshots and deltas (fields left at their
            defaults do not appear).
    """

    seq: int
    path: str
    label: str
    kind: str
    at: datetime
    value: Any
    state: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "path": self.path, "label": self.label, "kind": self.kind,
                "at": self.at.isoformat(), "value": self.value, "state": self.state}


async def history(store: Store, execution_id: str) -> list[Boundary]:
    """Every boundary of an execution, oldest first, each with its actor's state as of it.

    Raises:
        ExecutionNotFound: No such execution.
    """
    loaded = await store.load_execution(execution_id)
    if loaded is None:
        raise ExecutionNotFound(execution_id)
    return boundaries(loaded[1])


def boundaries(journal: Sequence[JournalEntry]) -> list[Boundary]:
    """The boundaries of a journal read already, oldest first, each with its actor's state as of it."""
    states: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    found = []
    for entry in journal:
        written = states.setdefault(entry.path, [])
        change = state_change(entry)
        if change is not None:
            written.append(change)
        found.append(Boundary(entry.seq, entry.path, entry.label, entry.kind, entry.created_at,
                              _value(entry), delta.restore(written)))
    return found


def state_change(entry: JournalEntry) -> tuple[str, dict[str, Any]] | None:
    """What ``entry`` did to the state of the actor at its path, as `delta.restore` takes it.

    A snapshot gives the actor's fields (``("snapshot", fields)``), a message
    handled the delta it made (``("delta", delta)``); every other entry (a step,
    an inbox, a suspension, a verdict) changes no state and gives None.
    """
    payload: Any = entry.payload
    if entry.kind == "snapshot":
        return "snapshot", payload
    if entry.label.startswith("msg:") and isinstance(payload, dict):
        return "delta", payload.get("delta", {})
    return None


def _value(entry: JournalEntry) -> Any:
    payload: Any = entry.payload
    if not isinstance(payload, dict):
        return payload
    if entry.label == "inbox":
        return payload.get("message")
    if entry.kind == "resumed":
        return payload.get("value")
    if "step" in payload:
        return payload.get("result")
    if entry.label.startswith("msg:"):
        return {key: payload[key] for key in ("reply", "finish") if key in payload}
    return payload


async def fork(
    store: Store,
    execution_id: str,
    *,
    at: int | str,
    new_execution_id: str,
    update: JsonValue = _UNSET,
    effects: Literal["again", "reuse"] = "again",
    by: str | None = None,
) -> Execution:
    """Record a new execution whose journal is the original's up to and including ``at``.

    The original is not touched. The fork is left ``running`` with no lease
    held: the next ``resume(new_execution_id)`` of its runner (or a worker)
    continues it from that boundary, as after a crash there. Its journal ends
    with a ``fork`` entry naming where it came from (``tether show`` prints it).

    Side effects: ``@idempotent`` records belong to their execution, so what a
    fork runs after its boundary runs again, side effects included. With
    ``effects="reuse"`` the fork gets a copy of the original's records: a call
    the fork makes as the original did (same place, same arguments) returns
    the original's result without running, and only a call that differs runs.

    Args:
        store: Where both executions live.
        execution_id: The execution to fork.
        at: The boundary: its ``seq`` (from `history`), or a label (``"node:b"``,
            ``"turn:2"``) or full path (``"chain:c/node:b"``), the first such entry.
        new_execution_id: The fork's id; it must be new.
        update: Replaces what the boundary holds: a step's result (a node's
            update, an LLM turn) or a decision's value. Anything after the
            boundary then follows from it.
        effects: ``"again"`` (the default): the fork's side effects are its own.
            ``"reuse"``: the original's recorded results answer the same calls,
            for a replay that must not touch the world.
        by: Who forks (``api:alice``), journaled in the ``fork`` entry and as
            the decider of a decision ``update`` replaces.

    Raises:
        ExecutionNotFound: No execution ``execution_id``.
        ConfigurationError: ``new_execution_id`` exists, ``at`` names no boundary
            (the message lists them), the execution never started, or ``update``
            is given for a boundary that holds no result or decision.
        pydantic.ValidationError: ``update`` for a decision is not a valid one
            for the call it answers; nothing was written.
    """
    if effects not in ("again", "reuse"):
        raise ConfigurationError(f"effects={effects!r}: give 'again' (the fork's effects are its own) or 'reuse'.")
    loaded = await store.load_execution(execution_id)
    if loaded is None:
        raise ExecutionNotFound(execution_id)
    execution, journal = loaded
    if not journal:
        raise ConfigurationError(
            f"Execution {execution_id!r} never started (it is {execution.status}, with an empty journal): "
            f"there is nothing to fork. Run it first."
        )
    cut = _boundary(journal, at, execution_id)
    # The original's entries, with their numbers and times: a decision's suspended_seq
    # inside them still points at the entry it meant.
    kept = [entry.model_copy(update={"execution_id": new_execution_id}) for entry in journal[:cut]]
    if update is not _UNSET:
        kept[-1] = _updated(kept, kept[-1], update, execution_id)
        if kept[-1].kind == "resumed" and isinstance(kept[-1].payload, dict):
            # Whoever decided the original did not decide this: the fork's maker did, if named.
            payload = {key: value for key, value in kept[-1].payload.items() if key != "by"}
            kept[-1] = kept[-1].model_copy(update={"payload": {**payload, **({"by": by} if by else {})}})
    kept = [entry for entry in kept if not _final_verdict(entry)]  # the fork's verdict will be its own
    lineage: dict[str, JsonValue] = {"from": execution_id, "at": journal[cut - 1].seq, "label": journal[cut - 1].label,
               "updated": update is not _UNSET, "effects": effects, **({"by": by} if by else {})}
    # Made in two steps, SIGKILL-safe: the row first, under a version no runner has (nothing
    # continues it, should this process die now), then its journal and real version in one transaction.
    owner = f"{process_owner()}/fork{tag()}"
    started = await store.start_execution(
        NewExecution(execution_id=new_execution_id, runner=execution.runner, root_path=execution.root_path,
                     fingerprint=execution.fingerprint, version=FORKING, input=execution.input),
        owner=owner, lease_seconds=60,
    )
    lease = started.lease
    existing = started.execution
    if (not started.created and existing.version == FORKING and not existing.finished
            and (existing.root_path, existing.input) == (execution.root_path, execution.input)):
        # A fork of this id whose process died before finishing it (LeaseHeld if it is alive): made again.
        lease = await take_lease(store, new_execution_id, owner=owner, lease_seconds=60,
                                 path=execution.root_path)
    elif not started.created or lease is None:
        if lease is not None:
            await store.release_lease(lease)  # an existing run it let us hold: left as it was
        raise ConfigurationError(
            f"Execution {new_execution_id!r} already exists: give the fork a new id."
        )
    kept.append(JournalEntry(execution_id=new_execution_id, seq=journal[cut - 1].seq + 1, path=execution.root_path,
                             label="fork", kind="entry", payload=lineage, created_at=datetime.now(UTC)))
    try:
        if effects == "reuse":
            # A record's key begins with its execution's id: the fork's calls look under their own.
            asks = {(e.path, e.seq): e.payload.get("id") for e in journal
                    if e.label == "inbox" and isinstance(e.payload, dict)}
            for record in await store.list_idempotent(execution_id):
                for key in _reused_keys(record.key, execution_id, new_execution_id, journal[cut - 1].seq, asks):
                    await store.put_idempotent(lease, key, record.value)
        installed().faults.reached("fork_started")
        await store.rewrite(lease, kept, pending=[], version=execution.version, fingerprint=execution.fingerprint)
        await store.release_lease(lease)
    except BaseException:
        with anyio.CancelScope(shield=True), contextlib.suppress(StoreError):
            await store.delete_execution(new_execution_id)  # not half a fork, to be run from its start
        raise
    forked = await store.get_execution(new_execution_id)
    assert forked is not None
    return forked


def _reused_keys(key: str, execution_id: str, new_execution_id: str, last: int,
                 asks: dict[tuple[str, int], Any]) -> list[str]:
    """The keys a record goes under in the fork: where the fork's same call looks for it.

    A key names its execution, then the actor and the message by its journal
    number (``inbox:7``). The fork's ``fork`` entry takes the number after
    ``last``, so a message the original accepted later is one further on in the
    fork, as long as the fork does what the original did in the same order. A
    message that came by an ask is also found by the ask (``ask_alias``),
    whatever number it gets: parallel asks may be numbered in another order.
    """
    parts = key.split("|")
    if len(parts) < 4 or parts[0] != execution_id:
        return [key]  # not one tether made: left as it was
    parts[0] = new_execution_id
    kind, _, number = parts[2].partition(":")
    if kind != "inbox" or not number.isdigit() or int(number) <= last:
        return ["|".join(parts)]
    keys = ["|".join([*parts[:2], f"inbox:{int(number) + 1}", *parts[3:]])]
    ask_id = asks.get((parts[1], int(number)))
    alias = ask_alias(execution_id, ask_id) if isinstance(ask_id, str) else None
    if alias is not None:
        keys.append("|".join([*parts[:2], alias, *parts[3:]]))
    return keys


def _boundary(journal: list[JournalEntry], at: int | str, execution_id: str) -> int:
    """How many entries the fork keeps: up to and including the one ``at`` names."""
    for index, entry in enumerate(journal):
        if (entry.seq == at) if isinstance(at, int) else names(at, entry.path, entry.label):
            return index + 1
    shown = ", ".join(f"{e.seq} {e.path}/{e.label}" for e in journal[:40])
    more = f" (and {len(journal) - 40} more)" if len(journal) > 40 else ""
    raise ConfigurationError(
        f"Execution {execution_id!r} has no boundary {at!r}. Its boundaries: {shown}{more}. "
        f"Give a seq or a label from them (tether history {execution_id})."
    )


def _updated(journal: list[JournalEntry], entry: JournalEntry, update: JsonValue, execution_id: str) -> JournalEntry:
    """``entry`` holding ``update`` instead: a step's result, or a decision (checked as one)."""
    payload: Any = entry.payload
    if isinstance(payload, dict) and "step" in payload:
        changed = {**payload, "result": update}
    elif entry.kind == "resumed" and isinstance(payload, dict):
        # Checked as a decision for that call is (ValidationError, before anything is written).
        [asked] = [e.payload for e in journal if e.seq == payload.get("suspended_seq")] or [{}]
        name = asked.get("expect") if isinstance(asked, dict) else None
        expected = loaded_model(name) if isinstance(name, str) else Resume
        if expected is None:
            raise ConfigurationError(
                f"The decision at boundary {entry.seq} of {execution_id!r} is of type {name}, which this process "
                f"does not define, so it cannot check the update; fork from a process that loads the application."
            )
        changed = {**payload, "value": expected.model_validate(update).model_dump(mode="json")}
    else:
        raise ConfigurationError(
            f"Boundary {entry.seq} ({entry.path}/{entry.label}) of {execution_id!r} holds no result or decision "
            f"to update: fork at a step (a node, a turn, a tool call) or a decision, or leave update out."
        )
    return entry.model_copy(update={"payload": changed})


def _final_verdict(entry: JournalEntry) -> bool:
    """Whether ``entry`` is an execution's last word: completed, failed or cancelled, at its root."""
    return verdict_of(entry) in FINAL_VERDICTS
