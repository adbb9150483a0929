"""Moving a run from one version of its runner to another.

A run continues on the version it started on. When that code is gone, or the
run should take the new one, a migration moves it: a function registered with
``@runner.migrate(from_version="1")`` renames what the new version calls
otherwise, drops what it no longer has, and may replace a step's result. The
journal and pending interrupts are rewritten in one transaction, under the
run's lease, with a ``migrated`` entry that says what changed; a function that
raises, or a result the new version still cannot replay, changes nothing.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import anyio
from tether.runtime._core.interrupt import content_digest
from tether.runtime._core.owners import process_owner, tag
from tether.stores import ConfigurationError, ExecutionNotFound, JournalEntry, TetherError

from .history import _boundary, _updated
from .service import FORKING

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from pydantic import JsonValue
    from tether.stores import Execution, ExecutionStatus, PendingInterrupt, Store

    from .runner import Runner

    Migrate = Callable[["Migration"], "Awaitable[None] | None"]
    """A migration function: it changes the `Migration` it is given."""


class MigrationFailed(ConfigurationError):
    """A migration function raised, or left a journal the new version cannot replay; nothing changed."""


@dataclass
class Migration:
    """A run on its way to another version: what a migration function changes.

    Attributes:
        execution: The run, as stored (``execution.version`` is the one it leaves).
        journal: Its journal as it will be written; read it to decide what to change.
        pending: Its pending interrupts as they will be written.
        changes: What was changed so far, in words (journaled with the migration).
    """

    execution: Execution
    journal: list[JournalEntry]
    pending: list[PendingInterrupt]
    changes: list[str] = field(default_factory=list)

    def rename(self, old: str, new: str) -> None:
        """Rename a path segment everywhere the run holds it: ``rename("node:review", "node:sign_off")``.

        Works for nodes, tools, swarm members (``agent:``) and workers: in paths,
        step keys and ask ids, in the LLM turns that called the tool (or the
        ``delegate_to_``/``handoff_to_`` tool a member's name makes), and in the
        ``to``, ``by`` and ``handoff_to`` fields of delegations and handoffs. The
        pending interrupts move with it.

        Raises:
            ConfigurationError: The segments are not ``kind:name`` of one kind.
        """
        kind, name = _segment(old)
        new_kind, new_name = _segment(new)
        if kind != new_kind:
            raise ConfigurationError(f"rename({old!r}, {new!r}): a {kind} can only be renamed to another {kind}.")

        renaming = _Renaming.of(kind, name, new_name)
        renamed = [entry.model_copy(update={"path": renaming.text(entry.path), "label": renaming.text(entry.label),
                                            "payload": renaming.value(entry.payload)}) for entry in self.journal]
        asks = _asks_renamed(self.journal, renamed)
        touched = 0
        for index, (entry, changed) in enumerate(zip(self.journal, renamed, strict=True)):
            ask = changed.payload.get("id") if isinstance(changed.payload, dict) else None
            if isinstance(ask, str) and ask in asks:
                changed = changed.model_copy(update={"payload": {**changed.payload, "id": asks[ask]}})  # type: ignore[dict-item]
            if changed != entry:
                touched += 1
                self.journal[index] = changed
        for index, row in enumerate(self.pending):
            moved = renaming.text(row.agent_path)
            if moved != row.agent_path:
                touched += 1
                self.pending[index] = row.model_copy(update={"agent_path": moved})
        self.changes.append(f"renamed {old} to {new} ({touched} entries)")

    def drop(self, segment: str) -> None:
        """Forget what the run did at or below a segment: ``drop("tool:legacy_lookup")``.

        Its steps, suspensions, decisions and pending interrupts go. A dropped
        node is not run again unless the new version reaches it; a dropped call
        the run is paused in is made again when the run continues, on the new
        version (a tool it no longer has answers the LLM that it does not exist).

        Raises:
            ConfigurationError: The segment is not ``kind:name``.
        """
        _segment(segment)

        def under(path: str) -> bool:
            return any(_names(part, segment) for part in path.split("/"))

        kept = [entry for entry in self.journal if not _holds(entry, under)]
        dropped = len(self.journal) - len(kept)
        self.journal[:] = kept
        pending = [row for row in self.pending if not under(row.agent_path)]
        dropped += len(self.pending) - len(pending)
        self.pending[:] = pending
        self.changes.append(f"dropped {segment} ({dropped} entries)")

    def replace(self, at: int | str, result: JsonValue) -> None:
        """Replace what a step or a decision holds, as ``fork(update=...)`` does: ``replace("node:quote", {...})``.

        Raises:
            ConfigurationError: ``at`` names no boundary, or one with no result or decision.
        """
        index = _boundary(self.journal, at, self.execution.execution_id) - 1
        entry = self.journal[index]
        self.journal[index] = _updated(self.journal, entry, result, self.execution.execution_id)
        self.changes.append(f"replaced the result at {entry.seq} ({entry.path}/{entry.label})")


@dataclass(frozen=True)
class Migrated:
    """What `migrate` did (or, with ``dry_run``, would do) to one run."""

    execution_id: str
    from_version: str
    to_version: str
    changes: list[str]
    written: bool

    def as_json(self) -> dict[str, Any]:
        return {"execution_id": self.execution_id, "from": self.from_version, "to": self.to_version,
                "changes": self.changes, "written": self.written}


async def migrate(store: Store, execution_id: str, runner: Runner, *, dry_run: bool = False,
                  by: str | None = None) -> Migrated:
    """Move a run onto ``runner``'s version, with the migration registered for its own, once.

    Without a registered migration a run moves only when its journal fits the
    new version as it is. Under the run's lease, the journal (with a ``migrated``
    entry that says what changed), the pending interrupts and the version are
    rewritten in one transaction; then the run stands where it stood (paused,
    decided, ...) on the new version. With ``dry_run`` nothing is written: the
    result says what would change.

    Raises:
        ExecutionNotFound: No such execution.
        ConfigurationError: It finished, it is on that version already, it is of
            another runner, it needs a migration nobody registered, or it changed
            while it was being migrated (migrate it again).
        MigrationFailed: The migration function raised, or its result still
            does not fit; nothing changed.
        LeaseHeld: A live process is running it; migrate it once it pauses.
    """
    loaded = await store.load_execution(execution_id)
    if loaded is None:
        raise ExecutionNotFound(execution_id)
    execution, journal = loaded  # as it stands: its status is what the migrated run goes back to
    target = runner.version or ""
    _check_movable(execution, runner, target)
    if dry_run:
        migration = await _migrated(execution, journal, await store.list_pending(execution_id=execution_id), runner)
        return Migrated(execution_id, execution.version, target, migration.changes, written=False)
    lease = await store.acquire_lease(execution_id, owner=f"{process_owner()}/migrate{tag()}", lease_seconds=60)
    written = False
    try:
        # Under the lease nobody else writes (a claim waits for it). What changed before it was
        # taken (a decision, a run, another migration) is not migrated over: the caller tries again.
        held = await store.load_execution(execution_id)
        if held is None:
            raise ExecutionNotFound(execution_id)
        if held[0].lease_epoch != execution.lease_epoch + 1 or [e.seq for e in held[1]] != [e.seq for e in journal]:
            raise ConfigurationError(
                f"Execution {execution_id!r} changed while it was being migrated (a decision, a run or another "
                f"migration came first); nothing was migrated. Migrate it again."
            )
        migration = await _migrated(execution, journal, await store.list_pending(execution_id=execution_id), runner)
        record: dict[str, JsonValue] = {"from": execution.version, "to": target, "changes": list(migration.changes)}
        if by is not None:
            record["by"] = by
        # Numbered after every entry it had, dropped ones included: no number is used twice.
        migrated = JournalEntry(execution_id=execution_id, seq=max(e.seq for e in journal) + 1 if journal else 1,
                                path=execution.root_path, label="migrated", kind="entry", payload=record,
                                created_at=datetime.now(UTC))
        await store.rewrite(lease, [*migration.journal, migrated], pending=migration.pending, version=target,
                            fingerprint=runner.fingerprint)
        written = True
        status, wake_at = _standing(execution, migration)
        await store.release_lease(lease, status=status, wake_at=wake_at)
    except BaseException:
        with anyio.CancelScope(shield=True):
            try:
                if written:  # migrated; only its status is not back: whoever takes it up next sets it
                    await store.release_lease(lease, wake_at=datetime.now(UTC))
                else:
                    await store.release_lease(lease, status=execution.status, wake_at=execution.wake_at)
            except TetherError:
                pass  # released above, or taken over: either way not ours to give back
        raise
    return Migrated(execution_id, execution.version, target, migration.changes, written=True)


def _check_movable(execution: Execution, runner: Runner, target: str) -> None:
    if execution.root_path != runner.root_path:
        raise ConfigurationError(
            f"Execution {execution.execution_id!r} is a run of {execution.root_path}, not of {runner.root_path}: "
            f"migrate it with a version of its own runner."
        )
    if execution.finished:
        raise ConfigurationError(
            f"Execution {execution.execution_id!r} is {execution.status}: a finished run has nothing to migrate."
        )
    if execution.version == FORKING:
        raise ConfigurationError(
            f"Execution {execution.execution_id!r} is a fork that was never finished: there is nothing to "
            f"migrate. Fork again with the same id to finish it."
        )
    if execution.version == target:
        raise ConfigurationError(
            f"Execution {execution.execution_id!r} is on version {target!r} already: nothing to migrate."
        )


async def _migrated(execution: Execution, journal: Sequence[JournalEntry], pending: Sequence[PendingInterrupt],
                    runner: Runner) -> Migration:
    """The run as the migration function leaves it, checked against the new version."""
    migration = Migration(execution, list(journal), list(pending))
    function = runner.migration_from(execution.version)
    target = runner.version or ""
    if function is not None:
        try:
            outcome = function(migration)
            if inspect.isawaitable(outcome):
                await outcome
        except Exception as exc:
            raise MigrationFailed(
                f"The migration of {execution.execution_id!r} from version {execution.version!r} to {target!r} "
                f"({getattr(function, '__qualname__', function)}) raised {type(exc).__name__}: {exc}. Nothing "
                f"changed: the run stays on version {execution.version!r}."
            ) from exc
    problem = runner.misfit(migration.journal)
    if problem is not None:
        if function is None:
            raise ConfigurationError(
                f"Execution {execution.execution_id!r} cannot move from version {execution.version!r} to "
                f"{target!r} as it is: {problem}. Register a migration with "
                f"@runner.migrate(from_version={execution.version!r}) that renames or drops it."
            )
        raise MigrationFailed(
            f"After its migration, the journal of {execution.execution_id!r} still does not fit version "
            f"{target!r}: {problem}. Nothing changed: the run stays on version {execution.version!r}."
        )
    if function is None:
        migration.changes.append("none needed: its journal fits")
    return migration


def _standing(execution: Execution, migration: Migration) -> tuple[ExecutionStatus | None, datetime | None]:
    """Where the migrated run stands: as before, unless its pause was dropped (then it continues)."""
    if execution.status == "paused" and not migration.pending and not execution.wake_at:
        return None, None  # what it waited for is gone: running, unheld, for the next resume or worker
    if execution.status in ("decided", "queued"):
        return execution.status, datetime.now(UTC)  # a worker carries it on, now on the new version
    return (None if execution.status == "running" else execution.status), execution.wake_at


def _segment(segment: str) -> tuple[str, str]:
    kind, colon, name = segment.partition(":")
    if not colon or not kind or not name or "/" in segment:
        raise ConfigurationError(
            f"{segment!r} is not a path segment: give it as kind:name, e.g. node:review or tool:lookup."
        )
    return kind, name


def _names(part: str, segment: str) -> bool:
    """Whether a path segment is ``segment``, as a call of it (``tool:x#2``, ``tool:x[1]``) or itself."""
    return part == segment or part.startswith((segment + "#", segment + "["))


def _renamed(part: str, old: str, new: str) -> str:
    """A segment with its name changed, when it is ``old`` (its call's number kept)."""
    return new + part[len(old):] if _names(part, old) else part


@dataclass(frozen=True)
class _Renaming:
    """One rename, as it applies to path segments, tool names and member names."""

    segments: dict[str, str]
    tools: dict[str, str]
    members: dict[str, str]

    @classmethod
    def of(cls, kind: str, name: str, new: str) -> _Renaming:
        segments = {f"{kind}:{name}": f"{kind}:{new}"}
        tools: dict[str, str] = {}
        members: dict[str, str] = {}
        if kind == "tool":
            tools[name] = new
        elif kind in ("worker", "agent"):
            # A member's name makes the tool that reaches it, and is the "to" of every delegation or handoff.
            tool = "delegate_to_" if kind == "worker" else "handoff_to_"
            tools[tool + name] = tool + new
            segments[f"tool:{tool}{name}"] = f"tool:{tool}{new}"
            members[name] = new
        return cls(segments, tools, members)

    def text(self, text: str) -> str:
        """A path, a label, a step key or an ask id, with every renamed segment renamed."""
        return "|".join("/".join(self._segment(part) for part in piece.split("/")) for piece in text.split("|"))

    def _segment(self, part: str) -> str:
        for old, new in self.segments.items():
            renamed = _renamed(part, old, new)
            if renamed != part:
                return renamed
        return part

    def value(self, value: Any) -> Any:
        """A payload with the rename applied all through it."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.value(item) for item in value]
        if not isinstance(value, dict):
            return value
        renamed = {}
        for key, item in value.items():
            if key == "name" and isinstance(item, str) and item in self.tools:
                renamed[key] = self.tools[item]
            elif key in ("to", "by", "handoff_to") and isinstance(item, str) and item in self.members:
                renamed[key] = self.members[item]
            else:
                renamed[key] = self.value(item)
        return renamed


def _asks_renamed(before: Sequence[JournalEntry], after: Sequence[JournalEntry]) -> dict[str, str]:
    """The ask ids whose message the rename changed, with the ids the new code will ask with.

    An ask id ends with a digest of the message asked: a message that names a
    renamed member (a swarm's blackboard) is asked under another id now.
    """
    asks: dict[str, str] = {}
    for old, new in zip(before, after, strict=True):
        old_payload: Any = old.payload
        new_payload: Any = new.payload
        if old.label != "inbox" or not isinstance(new_payload, dict) or not isinstance(new_payload.get("id"), str):
            continue
        ask_id, message = new_payload["id"], new_payload.get("message")
        was = old_payload.get("message") if isinstance(old_payload, dict) else None
        head, bar, digest = ask_id.rpartition("|")
        digest, hash_mark, ordinal = digest.partition("#")
        if message == was or not (bar and hash_mark) or not isinstance(message, dict) or not isinstance(was, dict):
            continue
        if digest == content_digest(was.get("data")):  # keyed as tether keys asks; anything else is left alone
            asks[ask_id] = f"{head}|{content_digest(message.get('data'))}#{ordinal}"
    return asks


def _holds(entry: JournalEntry, under: Callable[[str], bool]) -> bool:
    """Whether ``entry`` was written at or below the dropped segment."""
    payload: Any = entry.payload
    if under(f"{entry.path}/{entry.label}"):
        return True
    if isinstance(payload, dict):
        if isinstance(payload.get("step"), str) and under(payload["step"].split("|")[0]):
            return True
        if isinstance(payload.get("path"), str) and under(payload["path"]):
            return True
    return False

