"""What an operator does with executions, shared by the CLI and the HTTP API.

An `Operator` reads and acts on one store. Continuing an execution needs the
code of the runner that started it: `load_app` imports the runners a process
knows (``--app module:attr``), and each execution's stored root path and
definition fingerprint pick the one to use.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.runtime._core.events import verdict_of
from tether.runtime._executions import control as _control, history as _history, migration as _migration
from tether.runtime._executions.runner import Runner, runner_for
from tether.runtime._executions.service import Executions
from tether.stores import ConfigurationError, ExecutionNotFound, TetherError

if TYPE_CHECKING:
    from pydantic import BaseModel
    from tether.runtime._core.execution import RunResult
    from tether.stores import Execution, JournalEntry, PendingInterrupt, Store


def load_app(spec: str) -> list[Runner]:
    """Import the runners named by ``module:attr`` (one runner, a list of them, or a mapping).

    An object whose ``runner`` attribute is a runner counts as that runner.

    The current directory is importable, as for ``python -m``.

    Raises:
        ConfigurationError: The module or attribute is missing, or holds no runner.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigurationError(f"--app {spec!r}: give it as module:attr, for example myapp.flows:runners.")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"--app {spec!r}: cannot import {module_name!r}: {exc}") from exc
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ConfigurationError(f"--app {spec!r}: {module_name!r} has no {attr!r}.") from None
    found = list(target.values()) if isinstance(target, Mapping) else \
        list(target) if isinstance(target, list | tuple) else [target]
    # A wrapper around a runner (tether.actors.compat's classes) stands for the runner it wraps.
    found = [item.runner if isinstance(getattr(item, "runner", None), Runner) else item for item in found]
    strays = [repr(item) for item in found if not isinstance(item, Runner)]
    if strays or not found:
        raise ConfigurationError(
            f"--app {spec!r} must name a runner (Chain, Agent, Swarm, Supervisor), or a list or mapping "
            f"of them; found {', '.join(strays) or 'nothing'}."
        )
    return found


@dataclass(frozen=True)
class Decision:
    """A decision as the journal holds it: who decided what, when, for which call."""

    path: str
    value: Any
    at: datetime
    by: str | None
    """Who decided (``cli:alice``, ``page:bob``, ``deadline``), when the decider said."""

    def as_json(self) -> dict[str, Any]:
        return {"path": self.path, "value": self.value, "at": self.at.isoformat(), "by": self.by}


@dataclass
class Timeline:
    """One execution as an operator reads it."""

    execution: Execution
    pending: list[PendingInterrupt]
    entries: list[JournalEntry] = field(default_factory=list)

    @property
    def decision(self) -> Decision | None:
        """The decision a ``decided`` execution waits to have carried out (the latest one)."""
        if self.execution.status != "decided":
            return None
        for entry in reversed(self.entries):
            payload: Any = entry.payload
            if entry.kind == "resumed" and isinstance(payload, dict):
                by = payload.get("by")
                return Decision(entry.path, payload.get("value"), entry.created_at, by if isinstance(by, str) else None)
        return None

    def as_json(self) -> dict[str, Any]:
        """What ``tether show --json`` prints and ``GET /api/executions/{id}`` answers."""
        decision = self.decision
        return {
            "execution": self.execution.model_dump(mode="json"),
            "pending": [p.model_dump(mode="json") for p in self.pending],
            "decision": None if decision is None else decision.as_json(),
            "journal": [e.model_dump(mode="json") for e in self.entries],
        }


class Operator:
    """Read and act on the executions of one store.

    Args:
        store: An open store (or one that opens on first use).
        runners: The runners this process can continue executions with; they run
            on this store when they do.
    """

    def __init__(self, store: Store, runners: Sequence[Runner] = ()) -> None:
        self.store = store
        self.runners: list[Runner] = list(runners)

    async def pending(self, path_prefix: str | None = None, *, limit: int = 1000) -> list[PendingInterrupt]:
        """Pending interrupts, oldest first, optionally under a path prefix."""
        return await self.store.list_pending(path_prefix=path_prefix, limit=limit)

    async def executions(self, status: str | None = None, *, limit: int = 100) -> list[Execution]:
        """Executions, most recently updated first, across the whole store."""
        return await self.store.list_executions(status=status, limit=limit, recent=True)  # type: ignore[arg-type]

    async def show(self, execution_id: str) -> Timeline:
        """The execution, its pending interrupts and its whole journal.

        Raises:
            ExecutionNotFound: No such execution.
        """
        execution = await self.store.get_execution(execution_id)
        if execution is None:
            raise ExecutionNotFound(execution_id)
        pending = await self.store.list_pending(execution_id=execution_id)
        return Timeline(execution, pending, await self.store.read_journal(execution_id))

    async def decision(self, execution: Execution) -> Decision | None:
        """The decision a ``decided`` execution waits to have carried out; None for any other status."""
        if execution.status != "decided":
            return None  # only a decided one's journal is read: a listing stays one query for the rest
        return Timeline(execution, [], await self.store.read_journal(execution.execution_id)).decision

    def runner_for(self, execution: Execution) -> Runner | None:
        """The runner that continues ``execution`` here, or None if this process has none.

        Raises:
            ConfigurationError: A runner of that name is here, but its definition changed.
        """
        return runner_for(self.runners, execution)

    async def decide(self, execution_id: str, value: BaseModel | dict[str, Any], *, path: str | None = None,
                     seq: int | None = None, by: str | None = None) -> Runner | None:
        """Claim a pending interrupt with a decision (validated first); the run is not continued here.

        The execution is ``decided`` until a process with its runner carries the decision out.
        Returns the runner here that can (None if this process has none).
        """
        execution = await self.store.get_execution(execution_id)
        if execution is None:
            raise ExecutionNotFound(execution_id)
        journal = await self.store.read_journal(execution_id)
        runner = self.runner_for(execution)
        if runner is not None:  # its code is here: a definition the journal does not fit is refused first
            runner.check_fits(execution, journal)
        await Executions(self.store).decide(execution_id, value, path=path, seq=seq, by=by, journal=journal)
        return runner

    async def resume(self, execution_id: str, value: BaseModel | dict[str, Any] | None = None, *,
                       path: str | None = None, force: bool = False, by: str | None = None) -> RunResult:
        """Continue an execution in this process: with a decision, or from its journal.

        Raises:
            ExecutionNotFound: No such execution.
            ConfigurationError: No runner here for it (pass ``--app``), or its definition changed.
        """
        execution = await self.store.get_execution(execution_id)
        if execution is None:
            raise ExecutionNotFound(execution_id)
        runner = self.runner_for(execution)
        if runner is None:
            known = ", ".join(r.root_path for r in self.runners) or "none"
            raise ConfigurationError(
                f"No runner here for {execution.root_path} (execution {execution_id!r}); this process has: "
                f"{known}. Pass --app module:attr naming the runner that started it."
            )
        runner.store = self.store  # the operator's store is the one that holds this execution
        return await runner.resume(execution_id, value, path=path, force=force, by=by)

    async def history(self, execution_id: str) -> list[_history.Boundary]:
        """Every boundary of the execution, with its actor's state as of it."""
        return await _history.history(self.store, execution_id)

    async def fork(self, execution_id: str, *, at: int | str, new_execution_id: str,
                   update: Any = _history._UNSET, run: bool = False, effects: Any = "again",
                   by: str | None = None) -> RunResult:
        """Record a fork at a boundary; with ``run``, continue it here with its runner.

        Raises:
            ConfigurationError: As for `tether.runtime.fork`, or ``run`` without a runner here.
        """
        original = await self.store.get_execution(execution_id)
        runner = self.runner_for(original) if original is not None and run else None
        if run and original is not None and runner is None:
            raise ConfigurationError(
                f"No runner here for {original.root_path}: pass --app module:attr naming the runner that "
                f"started {execution_id!r}, or leave the fork to a worker (without --app)."
            )
        await _history.fork(self.store, execution_id, at=at, new_execution_id=new_execution_id, update=update,
                            effects=effects, by=by)
        if runner is None:
            return await Executions(self.store).result(new_execution_id)
        return await self.resume(new_execution_id)

    def runner_of_version(self, root_path: str, version: str) -> Runner:
        """The runner here of ``root_path`` at ``version``.

        Raises:
            ConfigurationError: This process has no such version (the message lists those it has).
        """
        alike = [runner for runner in self.runners if runner.root_path == root_path]
        for runner in alike:
            if (runner.version or "") == version:
                return runner
        known = ", ".join(repr(runner.version or "") for runner in alike) or "none"
        raise ConfigurationError(
            f"No runner of {root_path} at version {version!r} here (versions here: {known}). Pass --app "
            f"module:attr naming the code of version {version!r}: a run is only moved to code that can run it."
        )

    async def migrate(self, execution_id: str, *, to: str, dry_run: bool = False,
                      by: str | None = None) -> _migration.Migrated:
        """Move one run onto version ``to`` of its runner (see `tether.runtime.migrate`).

        Raises:
            ExecutionNotFound: No such execution.
            ConfigurationError: No runner of that version here, or the run cannot move (as for `migrate`).
            MigrationFailed: The migration function raised, or left a misfit; nothing changed.
        """
        execution = await self.store.get_execution(execution_id)
        if execution is None:
            raise ExecutionNotFound(execution_id)
        runner = self.runner_of_version(execution.root_path, to)
        return await _migration.migrate(self.store, execution_id, runner, dry_run=dry_run, by=by)

    async def migrate_all(self, *, from_version: str, to: str, dry_run: bool = False, by: str | None = None
                          ) -> list[tuple[str, _migration.Migrated | Exception]]:
        """Move every unfinished run on ``from_version`` of a runner here that has version ``to``.

        Each run moves on its own: one that cannot is reported (its error beside
        its id) and left as it was, and the others still move.
        """
        roots = {runner.root_path for runner in self.runners if (runner.version or "") == to}
        if not roots:
            here = ", ".join(f"{r.root_path} at {r.version or ''!r}" for r in self.runners) or "none"
            raise ConfigurationError(
                f"No runner here has version {to!r} (here: {here}). Pass --app module:attr naming the code "
                f"of version {to!r}: runs are only moved to code that can run them."
            )
        moved: list[tuple[str, _migration.Migrated | Exception]] = []
        after = None
        while True:
            page = await self.store.list_executions(limit=500, after=after)
            for execution in page:
                if execution.finished or execution.version != from_version or execution.root_path not in roots:
                    continue
                try:
                    done = await _migration.migrate(self.store, execution.execution_id,
                                                    self.runner_of_version(execution.root_path, to),
                                                    dry_run=dry_run, by=by)
                except (TetherError, ValueError) as exc:
                    moved.append((execution.execution_id, exc))
                else:
                    moved.append((execution.execution_id, done))
            if len(page) < 500:
                return moved
            after = page[-1]

    async def cancel(self, execution_id: str, *, reason: str = "", by: str | None = None, force: bool = False,
                     wait: float | None = None) -> RunResult:
        """Cancel an execution wherever it runs or waits (see `tether.runtime.cancel`)."""
        return await Executions(self.store).cancel(execution_id, reason=reason, by=by, force=force, wait=wait)

    async def retry(self, execution_id: str, *, by: str | None = None, here: bool = False) -> RunResult:
        """Make a failed execution continue from its last good boundary; with ``here``, continue it in this process.

        Raises:
            NotFailed: It did not fail; nothing was changed.
            ConfigurationError: ``here`` without a runner for it (checked before anything changes).
        """
        if here:
            execution = await self.store.get_execution(execution_id)
            if execution is not None and self.runner_for(execution) is None:
                raise ConfigurationError(
                    f"No runner here for {execution.root_path} (execution {execution_id!r}); nothing was "
                    f"retried. Pass --app module:attr naming the runner that started it."
                )
        result = await Executions(self.store).retry(execution_id, by=by)
        return await self.resume(execution_id) if here else result

    async def send_message(self, execution_id: str, message: dict[str, Any], *, path: str | None = None,
                           by: str | None = None) -> JournalEntry:
        """Send a durable message to an actor of an execution (see `tether.runtime.send_message`)."""
        return await _control.send_message(self.store, execution_id, message, path=path, by=by)

    async def prune(self, older_than: timedelta) -> int:
        """Delete finished executions last updated longer ago than ``older_than``."""
        return await self.store.prune(older_than=datetime.now(UTC) - older_than)


def parse_assignments(assignments: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``["approved=true", "metadata.approver=alice"]`` as ``{"approved": True, "metadata": {"approver": "alice"}}``.

    A value is read as JSON when it parses (``true``, ``3``, ``"x"``, ``[1]``), else kept as text.

    Raises:
        ConfigurationError: An assignment without ``=``, or one that puts a key inside a plain value.
    """
    value: dict[str, Any] = {}
    for assignment in assignments:
        key, sep, raw = assignment.partition("=")
        if not sep or not key:
            raise ConfigurationError(f"--set {assignment!r}: write it as key=value, e.g. approved=true.")
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError:
            parsed = raw
        *parents, last = key.split(".")
        node = value
        for parent in parents:
            child = node.setdefault(parent, {})
            if not isinstance(child, dict):
                raise ConfigurationError(f"--set {assignment!r}: {parent!r} is already a plain value.")
            node = child
        node[last] = parsed
    return value


def parse_duration(text: str) -> timedelta:
    """``30d``, ``12h``, ``45m``, ``90s`` as a timedelta.

    Raises:
        ConfigurationError: Anything else.
    """
    match = re.fullmatch(r"(\d+)([dhms])", text.strip())
    if match is None:
        raise ConfigurationError(f"{text!r} is not a duration: write it like 30d, 12h, 45m or 90s.")
    unit = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}[match.group(2)]
    return timedelta(**{unit: int(match.group(1))})


def summarize(entry: JournalEntry, width: int = 100) -> str:
    """What one journal entry recorded, in a line."""
    payload: Any = entry.payload
    if entry.kind == "suspended":
        text = f"suspended at {payload.get('path')}"
    elif entry.kind == "resumed":
        by = payload.get("by")
        text = f"decision for {entry.path}{f' by {by}' if isinstance(by, str) and by else ''}: " \
            f"{_short(payload.get('value'))}"
    elif entry.label == "takeover" and isinstance(payload, dict):
        # Who forced it comes first: it is what an operator looks for, and the owners are long.
        how = f"forced by {payload.get('operator')}" if payload.get("forced") else \
            "its process was dead" if payload.get("dead") else "its lease had expired"
        text = f"lease taken over ({how}) from {payload.get('from')}"
    elif entry.label == "fork" and isinstance(payload, dict):
        text = f"forked from {payload.get('from')} at {payload.get('at')} ({payload.get('label')})" + \
            (", updated" if payload.get("updated") else "")
    elif entry.kind == "snapshot":
        text = "state snapshot"
    elif verdict_of(entry) is not None and isinstance(payload, dict):
        waits = len(payload.get("pending") or [])
        text = {"paused": f"paused, waiting for {waits} decision{'s' if waits != 1 else ''}"
                          + (f" (timer until {payload['wake_at']})" if payload.get("wake_at") else ""),
                "completed": f"completed: {_short(payload.get('output'))}",
                "failed": f"failed: {payload.get('error')}"}.get(entry.label, entry.label)
    elif entry.label == "inbox":
        message = payload.get("message", {}) if isinstance(payload, dict) else {}
        text = f"received {message.get('type', 'a message')} {_short(message.get('data'))}"
    elif entry.label.startswith("msg:"):
        reply = payload.get("reply") if isinstance(payload, dict) else None
        text = "handled" + (f", replied {_short(reply)}" if reply is not None else "")
    elif isinstance(payload, dict) and "result" in payload:
        text = _fields(payload["result"])
    else:
        text = _fields(payload)
    return text if len(text) <= width else text[: width - 1] + "…"


def _fields(value: Any) -> str:
    """A step's result as ``key: value`` pairs, leaving out the empty ones."""
    if not isinstance(value, dict):
        return _short(value)
    shown = [f"{key}: {item if isinstance(item, str) else _short(item)}"
             for key, item in value.items() if item not in (None, "", [], {}, False)]
    return ", ".join(shown) or "{}"


def age(moment: datetime) -> str:
    """How long ago ``moment`` was, as ``4s``, ``12m``, ``3h`` or ``2d``."""
    seconds = max(0, int((datetime.now(UTC) - moment).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _short(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
