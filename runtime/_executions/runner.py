"""`Runner`: what every runner (`Chain`, `Agent`, `Swarm`, `Supervisor`) shares.

A runner is a named root actor over a store: `run` starts an execution in a
`Runtime` of its own, `resume` continues one, `decide` records a decision with
the store alone, and `drive` runs one a worker leased. The operator surface and
the worker know runners only through this class.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import warnings
from typing import TYPE_CHECKING, Any, Literal

import anyio
from tether.runtime._core.actor import check_name
from tether.runtime._core.hooks import installed
from tether.stores import ConfigurationError, NewExecution

from .history import _UNSET, Boundary, fork, history
from .queues import Queue, declared
from .runtime import Runtime, check_runner, deadline_after
from .service import Executions
from .stream import EventStream, Until, events

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Sequence
    from contextlib import AbstractAsyncContextManager
    from datetime import timedelta

    from pydantic import BaseModel, JsonValue
    from tether.runtime._core.actor import Actor
    from tether.runtime._core.execution import RunResult
    from tether.runtime._core.interrupt import Resume
    from tether.stores import Execution, JournalEntry, Lease, Store

    from .migration import Migrate


class Runner:
    """A named root actor over a store; `run` starts an execution, `resume` continues one."""

    name: str
    store: Store | None
    lease_seconds: float
    version: str | None = None
    """The version runs start on; None (the default): this runner names none."""
    _actor: type[Actor[Any]]
    _migrations: dict[str, Migrate] | None = None
    _prepared: tuple[str, str] | None = None  # the definition last checked, and its hash

    def _named(self, kind: str, name: str) -> str:
        """``name``, refused at once (`ConfigurationError`) if it cannot be a path segment."""
        return check_name(kind, name)

    def _versioned(self, version: str | None) -> str | None:
        """``version``, refused at once (`ConfigurationError`) unless it is None or a short name."""
        if version is not None and (not isinstance(version, str) or not _VERSION.fullmatch(version)):
            raise ConfigurationError(
                f"version={version!r}: give a version as a short name of letters, digits and . _ + - "
                f"(\"2\", \"2.1\", \"2026-12-refunds\"), or leave it out."
            )
        return version

    def migrate(self, *, from_version: str) -> Callable[[Migrate], Migrate]:
        """Register a function that moves a run of ``from_version`` onto this runner's version.

        It gets a `Migration` of the run (its journal, its pending interrupts)
        and changes it: ``rename`` a node, tool, member or worker, ``drop`` what
        this version no longer has, ``replace`` a step's result. `tether migrate`
        (or `tether.runtime.migrate`) applies it once, atomically, and journals
        what it changed; if it raises, nothing changes.

        Example:
            ```python
            @refunds_v2.migrate(from_version="1")
            def review_is_now_sign_off(run: Migration) -> None:
                run.rename("node:review", "node:sign_off")
            ```
        """
        if self.version is None:
            raise ConfigurationError(
                f"{type(self).__name__} {self.name!r} has no version to migrate runs to: give it one "
                f"(version=\"2\") before registering a migration from {from_version!r}."
            )
        if from_version == self.version:
            raise ConfigurationError(f"A migration from version {from_version!r} to itself changes nothing.")

        def register(fn: Migrate) -> Migrate:
            if self._migrations is None:
                self._migrations = {}
            self._migrations[from_version] = fn
            return fn

        return register

    def migration_from(self, version: str) -> Migrate | None:
        """The function registered with ``@migrate(from_version=version)``, if any."""
        return (self._migrations or {}).get(version)

    def check(self) -> None:
        """Refuse a definition that cannot run; called before a run or resume whose definition changed."""

    def shape(self) -> Shape | None:
        """The names its journal may hold, by path: ``{"node:charge": None, "worker:auditor": {...}}``.

        A key is a path segment this definition can write; its value is the shape
        below it (None: anything). A journal can be replayed by this definition,
        however else it changed, when every ``node:``, ``agent:`` and ``worker:``
        segment it holds is in the shape, and so is every ``tool:`` segment of a
        call it is suspended in (a finished call is answered from the journal,
        whether its tool is still there or not). None (the default, for runners
        that do not say): only the definition that started a run may continue it.
        """
        return None

    def misfit(self, journal: Sequence[JournalEntry]) -> str | None:
        """What in ``journal`` this definition cannot replay (a removed or renamed name), or None."""
        shape = self.shape()
        if shape is None:
            return "its definition changed, and this runner cannot tell whether its journal still fits"
        for entry in journal:
            paths = [(f"{entry.path}/{entry.label}", STRUCTURAL)]
            if entry.kind == "suspended" and isinstance(entry.payload, dict):
                paths.append((str(entry.payload.get("path", "")), STRUCTURAL | {"tool"}))  # the call it waits in
            for path, kinds in paths:
                missing = _missing(shape, path.split("/")[1:], kinds)
                if missing is not None:
                    kind, _, name = missing.partition(":")
                    return (f"its journal has {kind} {name!r} ({path}), which this definition of {self.root_path} "
                            f"does not: it was removed or renamed")
        return None

    def check_fits(self, execution: Execution, journal: Sequence[JournalEntry]) -> None:
        """Refuse (`ConfigurationError`) to continue ``execution`` on another version, or one its journal does not fit."""
        check_runner(execution, self._prepare(), journal)

    def definition(self) -> Any:
        """What a journal depends on (names of nodes, tools, members), not prompts or code."""
        return None

    @property
    def root_path(self) -> str:
        """The root actor's path, ``<kind>:<name>`` (``chain:refund``), as stored with each execution."""
        return f"{self._actor.kind}:{self.name}"

    @property
    def fingerprint(self) -> str:
        """A short hash of `definition`: stored with each execution, checked on resume."""
        return _digest(self._described())

    def _described(self) -> str:
        described = [type(self).__name__, self.name, self.definition()]
        if self.version is not None:  # an unversioned runner's hash is what it always was
            described.append({"version": self.version})
        return json.dumps(described, sort_keys=True)

    def _prepare(self) -> type[Actor[Any]]:
        # Checked again only when the definition changed: a 200-node chain's check and
        # hash cost 130 us a run, and a hundred runs started at once hold the loop for all of them.
        described = self._described()
        prepared = self._prepared
        if prepared is None or prepared[0] != described:
            self.check()
            prepared = self._prepared = (described, _digest(described))
        self._actor.fingerprint = prepared[1]  # type: ignore[attr-defined]
        self._actor.version = self.version or ""  # type: ignore[attr-defined]
        self._actor.misfit = self.misfit  # type: ignore[attr-defined]  # for a run its definition changed under
        return self._actor

    def _typed(self, result: RunResult) -> RunResult:
        """The result as callers receive it (a runner may type the output)."""
        return result

    def _store(self) -> Store:
        if self.store is None:
            raise ConfigurationError(
                f"{type(self).__name__} {self.name!r} has no store: pass store=SQLiteStore(...) to run it "
                f"on its own (inside a team, the team's store serves it)."
            )
        return self.store

    def _input(self, input: Any) -> JsonValue:
        """The input as journaled, or `ConfigurationError` before anything is written."""
        return input  # type: ignore[no-any-return]

    async def run(self, input: Any = None, *, execution_id: str, timeout: timedelta | float | None = None,
                  thread: str | None = None) -> RunResult:
        """Run to the end or to a pause, here; the execution id is an idempotency key.

        ``timeout`` is a durable deadline on the whole execution (see `Runtime.run`):
        past it, the run ends ``timed_out`` wherever it stands. ``thread`` names the
        conversation it is a run of.
        """
        data = self._input(input)
        actor = self._prepare()
        async with Runtime(self._store(), lease_seconds=self.lease_seconds) as rt:
            return self._typed(await rt.run(actor, data, execution_id=execution_id, name=self.name, timeout=timeout,
                                            thread=thread))

    @contextlib.asynccontextmanager
    async def stream(self, input: Any = None, *, execution_id: str, timeout: timedelta | float | None = None,
                     thread: str | None = None) -> AsyncIterator[EventStream]:
        """Run an execution here, as `run` does, and follow its events while it runs.

        The block owns the run: leaving it waits for the run to return (to its end or
        its first pause), and an error in the block cancels it (the run stays
        recoverable). Iterating ends once the run returned and every event it
        journaled was delivered; then ``stream.result`` is its `RunResult`. A run
        that raises raises from the iteration, or from the block's end. An id that
        exists already is run as `run` runs it, and its events come from the
        beginning of its journal.

        A follower that stops reading never slows the run: the journal waits in
        the store, and live events (tokens) beyond a bounded buffer are dropped,
        then counted by a `Dropped` event.

        Example:
            ```python
            async with agent.stream("Refund order 7", execution_id="refund-7") as events:
                async for event in events:
                    if event.type == "token":
                        print(event.text, end="")
            print(events.result.status)
            ```
        """
        data = self._input(input)
        try:
            async with anyio.create_task_group() as tg, \
                    events(self._store(), execution_id, _driven_here=True) as followed:
                async def run() -> None:
                    result, error = None, None
                    try:
                        result = await self.run(data, execution_id=execution_id, timeout=timeout, thread=thread)
                    except Exception as exc:  # noqa: BLE001 - raised to the follower, or at the block's end
                        error = exc
                    finally:
                        followed._run_returned(result, error)

                tg.start_soon(run)
                yield followed
        except BaseExceptionGroup as group:
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None  # the block's own error, as it raised it
            raise
        if followed._error is not None:
            raise followed._error  # the block never iterated to it

    def events(self, execution_id: str, *, after: int = 0, until: Until = "finished",
               live: bool = True, buffer: int = 1000) -> AbstractAsyncContextManager[EventStream]:
        """Follow an execution's events wherever it runs (see `tether.runtime.events`)."""
        return events(self._store(), execution_id, after=after, until=until, live=live, buffer=buffer)

    async def start(self, input: Any = None, *, execution_id: str, detach: bool = True,
                    timeout: timedelta | float | None = None, thread: str | None = None,
                    queue: str | Queue | None = None, key: str | None = None,
                    priority: int | None = None) -> RunResult:
        """Start an execution; with ``detach`` (the default), record it for a worker and return at once.

        A detached execution is ``queued`` until a worker (``tether worker``) with
        this runner takes it up. Without ``detach`` this is `run`. ``timeout``
        counts from now (see `run`).

        With ``queue`` (a `Queue` this process declared, or its name), workers
        admit it by the queue's limits: ``key`` says whose it is (what
        ``per_key`` counts), ``priority`` its turn among those waiting (lower
        first; for a queue declared with ``priority=True``).

        Raises:
            ConfigurationError: A queue not declared here, ``key`` or ``priority``
                without a queue, a priority the queue does not take or out of range,
                or a queue with ``detach=False``; nothing was recorded.
        """
        placed: tuple[str | None, str | None, int] = (None, None, 0)
        declared_queue: Queue | None = None
        if queue is not None:
            if not detach:
                raise ConfigurationError(
                    f"queue={queue!r} with detach=False: a queue admits executions to workers, so its starts are "
                    f"detached. Drop detach=False, or the queue to run here at once."
                )
            declared_queue = declared(queue)
            placed = (declared_queue.name, *declared_queue.placement(key, priority))
        elif key is not None or priority is not None:
            raise ConfigurationError("key= and priority= place an execution in a queue: give queue= too.")
        if not detach:
            return await self.run(input, execution_id=execution_id, timeout=timeout, thread=thread)
        data = self._input(input)
        actor = self._prepare()
        service = Executions(self._store())
        if declared_queue is not None:  # the workers' limits, whichever starts first
            await service.store.declare_queue(declared_queue.limits)
        return await service.enqueue(
            NewExecution(execution_id=execution_id, runner=actor.__qualname__, root_path=self.root_path,
                         fingerprint=self.fingerprint, version=self.version or "", input=data,
                         deadline=deadline_after(timeout, installed()), thread=thread,
                         queue=placed[0], queue_key=placed[1], priority=placed[2])
        )

    async def retry(self, execution_id: str, *, by: str | None = None) -> RunResult:
        """Continue a failed execution from its last good boundary, here: its finished steps are not run again.

        The failed step runs again, then the rest, to the end or the next pause.

        Raises:
            NotFailed: It did not fail; nothing was changed.
            ExecutionNotFound: No such execution.
        """
        await Executions(self._store(), lease_seconds=self.lease_seconds).retry(execution_id, by=by)
        return await self.resume(execution_id)

    async def cancel(self, execution_id: str, *, reason: str = "", by: str | None = None, force: bool = False,
                     wait: float | None = None) -> RunResult:
        """Cancel one of this runner's executions, wherever it runs or waits (see `tether.runtime.cancel`)."""
        return await Executions(self._store(), lease_seconds=self.lease_seconds).cancel(
            execution_id, reason=reason, by=by, force=force, wait=wait
        )

    async def decide(
        self,
        execution_id: str,
        value: Resume | BaseModel | dict[str, Any],
        *,
        path: str | None = None,
        seq: int | None = None,
        by: str | None = None,
    ) -> None:
        """Record a decision (claimed exactly once) and leave the run to whoever takes it up.

        The execution is ``decided`` afterwards: a worker with this runner, or a
        later `resume` without a value, carries the decision out. Only the store
        is used: no actor runs here.

        Raises:
            AlreadyResumed: Someone decided first; nothing changed.
            NoPendingInterrupt, LeaseHeld, ExecutionNotFound: As for `resume`.
            pydantic.ValidationError: ``value`` is not a valid decision; nothing was claimed.
        """
        await Executions(self._store(), lease_seconds=self.lease_seconds).decide(
            execution_id, value, path=path, seq=seq, by=by
        )

    async def submit_resume(
        self, execution_id: str, value: Resume | BaseModel | dict[str, Any], *, path: str | None = None
    ) -> None:
        """Deprecated name of `decide`."""
        warnings.warn(f"{type(self).__name__}.submit_resume() is now .decide()", DeprecationWarning, stacklevel=2)
        await self.decide(execution_id, value, path=path)

    async def drive(self, lease: Lease, *, lease_seconds: float | None = None,
                    execution: Execution | None = None, journal: Sequence[JournalEntry] | None = None,
                    runtime: Runtime | None = None) -> RunResult:
        """Run an execution a worker leased with `Store.take_work` (what `ExecutionWorker` calls).

        ``lease_seconds`` is the worker's: its renewals must match the lease it took.
        ``execution`` is its row, and ``journal`` its journal, when the caller read
        them under the lease (`Store.load_execution`: one statement). ``runtime`` hosts
        the run (a worker's, open for its life); without one, a runtime is opened
        for this run alone, on the runner's store.
        """
        actor = self._prepare()
        if runtime is not None:
            return self._typed(await runtime.drive(actor, lease, execution=execution, journal=journal))
        async with Runtime(self._store(), lease_seconds=lease_seconds or self.lease_seconds) as rt:
            return self._typed(await rt.drive(actor, lease, execution=execution, journal=journal))

    async def run_leased(self, lease: Lease, *, lease_seconds: float | None = None) -> RunResult:
        """Deprecated name of `drive`."""
        warnings.warn(f"{type(self).__name__}.run_leased() is now .drive()", DeprecationWarning, stacklevel=2)
        return await self.drive(lease, lease_seconds=lease_seconds)

    async def history(self, execution_id: str) -> list[Boundary]:
        """Every boundary of an execution, with its actor's state as of it (see `tether.runtime.history`)."""
        return await history(self._store(), execution_id)

    async def fork(self, execution_id: str, *, at: int | str, new_execution_id: str,
                   update: JsonValue = _UNSET, effects: Literal["again", "reuse"] = "again") -> RunResult:
        """Fork an execution at a boundary and run the fork here, to its end or its first pause.

        The original is not touched; the fork continues from that boundary as a
        run recovered after a crash there would (see `tether.runtime.fork`), its
        side effects after the boundary included.

        Raises:
            ExecutionNotFound, ConfigurationError: As for `tether.runtime.fork`.
        """
        await fork(self._store(), execution_id, at=at, new_execution_id=new_execution_id, update=update,
                   effects=effects)
        return await self.resume(new_execution_id)

    async def resume(
        self,
        execution_id: str,
        value: Resume | BaseModel | dict[str, Any] | None = None,
        *,
        path: str | None = None,
        force: bool = False,
        by: str | None = None,
    ) -> RunResult:
        """Resume a paused run with a decision, or recover a crashed one (no value).

        In any process that builds the same runner. With a decision, the pending
        interrupt (the only one, or the one at ``path``) is claimed atomically:
        a second resumer gets `AlreadyResumed` and changes nothing. A run whose
        process died on this machine is taken over at once; ``force`` takes over
        a lease held elsewhere too (see `Runtime.resume`). ``by`` names the decider
        in the journal.
        """
        actor = self._prepare()
        async with Runtime(self._store(), lease_seconds=self.lease_seconds) as rt:
            return self._typed(await rt.resume(actor, execution_id, value, path=path, force=force, by=by))


def runner_for(runners: Sequence[Runner], execution: Execution) -> Runner | None:
    """The runner among ``runners`` that continues ``execution``, or None if there is none.

    Of those with its root path: the one of its version (with the definition that
    started it, if several), else the newest. Whether that one may continue it is
    judged when it is taken up (`Runtime.resume`, `Runtime.drive`): another
    version may not, a changed definition may if its journal fits.
    """
    alike = [runner for runner in runners if runner.root_path == execution.root_path]
    versioned = [runner for runner in alike if (runner.version or "") == execution.version] or alike
    same = [runner for runner in versioned if runner.fingerprint == execution.fingerprint]
    found = same or versioned
    return newest(found) if found else None


def newest(runners: Sequence[Runner]) -> Runner:
    """The runner of the highest version (``"10"`` after ``"9"``; no version first), the last given on a tie."""
    return max(reversed(runners), key=lambda runner: version_key(runner.version))


def version_key(version: str | None) -> tuple[tuple[int, int | str], ...]:
    """How versions are ordered: digits as numbers, the rest as text, none before any."""
    if version is None:
        return ()
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.findall(r"\d+|\D+", version))


_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
Shape = dict[str, "Shape | None"]
STRUCTURAL = frozenset({"node", "agent", "worker"})
"""The path segments every journal entry is checked for; the others (turn:2, msg:1, delegate:1) are counters."""


def _missing(shape: Shape, segments: list[str], kinds: frozenset[str]) -> str | None:
    """The first segment of ``kinds`` not in ``shape``, walking down it.

    A call's number (``tool:x#2``, ``tool:x[1]`` for the second call of one turn) is
    not part of its name.
    """
    here: Shape | None = shape
    for segment in segments:
        if here is None:
            return None  # below a node: whatever its function calls
        kind = segment.partition(":")[0]
        if kind not in kinds and kind != "tool":
            continue
        name = segment.partition("#")[0].partition("[")[0]
        if name not in here:
            return name if kind in kinds else None  # a finished tool call: answered from the journal
        here = here[name]
    return None


def _digest(described: str) -> str:
    return hashlib.sha256(described.encode()).hexdigest()[:16]
