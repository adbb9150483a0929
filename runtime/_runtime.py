"""`Runtime`: owns the task group that every actor of an application runs in."""

from __future__ import annotations

import contextlib
import json
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Self

import anyio
from pydantic import BaseModel, JsonValue
from tether.stores import (
    ConfigurationError,
    ExecutionFinished,
    ExecutionNotFound,
    Lease,
    LeaseHeld,
    NewExecution,
    StaleLease,
    Store,
    StoreError,
    StoreUnavailable,
    TetherError,
    UsageError,
)

from . import _faults
from ._actor import check_name, segment
from ._execution import ExecutionState, RunResult, Start
from ._interrupt import Resume, loaded_model
from ._journal import LeaseHolder, take_lease
from ._owners import is_dead, process_owner, tag
from ._supervision import Group, Settings
from ._supervision_types import RestartPolicy, SupervisionStrategy

if TYPE_CHECKING:
    from types import TracebackType

    from tether.stores import Execution

    from ._actor import ActorFactory
    from ._ref import ActorRef


class Runtime:
    """The root of an actor tree, embedded in an application's own lifetime.

    Constructing a runtime starts nothing. ``async with Runtime(store) as rt:``
    opens its task group; leaving the block stops every actor, children before
    parents, last started first. It works the same under asyncio and trio.

    Args:
        store: Where durable actors journal. Not needed if no actor is durable.
            The runtime opens it but leaves closing it to its owner.
        mailbox_size: How many messages a mailbox holds before ``send`` waits.
        lease_seconds: How long a durable actor's lease lasts without renewal;
            another process can take the actor over that long after this one dies.
        snapshot_every: A durable actor snapshots its state every this many messages.
        max_restarts, within: Restart intensity of the top-level actors.

    Example:
        ```python
        async with Runtime(SQLiteStore("bank.db")) as rt:
            account = await rt.spawn(AccountActor, "42", durable=True)
            await account.send(Deposit(amount=100))
        ```
    """

    def __init__(
        self,
        store: Store | None = None,
        *,
        mailbox_size: int = 1000,
        lease_seconds: float = 30.0,
        snapshot_every: int = 100,
        max_restarts: int = 3,
        within: float = 5.0,
    ) -> None:
        wrap = _faults.store_wrapper.get()
        if store is not None and wrap is not None:
            store = wrap(store)  # a test's in-process crash: see tether.runtime.testing
        self.store = store
        # Each runtime is its own lease owner, so two runtimes in one process exclude each other.
        owner = f"{process_owner()}/{tag()}"
        self._settings = Settings(store, mailbox_size, lease_seconds, snapshot_every, owner)
        self._max_restarts = max_restarts
        self._within = within
        self._stack: AsyncExitStack | None = None
        self._root: Group | None = None
        self._used = False

    async def __aenter__(self) -> Self:
        if self._used:
            raise UsageError("A Runtime can be entered once. Create a new Runtime to run again.")
        self._used = True
        if self.store is not None:
            await self.store.setup()
        stack = AsyncExitStack()
        try:
            tg = await stack.enter_async_context(anyio.create_task_group())
            root = Group(tg, "", SupervisionStrategy.ONE_FOR_ONE, self._max_restarts, self._within,
                         self._settings)
        except BaseException:
            await stack.aclose()
            raise
        self._stack, self._root = stack, root
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        stack, root = self._stack, self._root
        assert stack is not None
        assert root is not None
        self._root = None
        own_error: BaseException | None = None
        try:
            with anyio.CancelScope(shield=True):
                await root.stop_all()
        finally:
            root.close()
            root._tg.cancel_scope.cancel()
            try:
                suppressed = await stack.__aexit__(exc_type, exc, tb)
            except BaseExceptionGroup as group:
                # The block's own error, wrapped by the task group on its way out: give it back
                # as it was raised, so callers catch AlreadyResumed, not a group holding it.
                if exc is None or list(group.exceptions) != [exc]:
                    raise
                own_error = exc
        if own_error is not None:
            raise own_error
        return suppressed

    async def spawn(
        self,
        factory: ActorFactory,
        name: str,
        *,
        durable: bool = False,
        execution_id: str | None = None,
        restart: RestartPolicy = "permanent",
        shutdown_timeout: float = 5.0,
    ) -> ActorRef:
        """Start a top-level actor and return its ref once it is ready.

        Args:
            factory: The Actor subclass (or a zero-argument callable returning an actor).
            name: Its name; the path is ``<kind>:<name>``.
            durable: Journal every message boundary in the store, restore from it on
                restart and in later processes, and hold a lease so that only one
                process runs it.
            execution_id: The durable actor's execution id (default: its path).
            restart: When it is restarted after it stops (see `RestartPolicy`).
            shutdown_timeout: Seconds it gets to finish its message when stopped.

        Raises:
            LeaseHeld: A durable actor that another live process runs.
            UsageError: The runtime is not running.
        """
        if self._root is None:
            raise UsageError(
                "Cannot spawn: the runtime is not running. Spawn inside 'async with Runtime(...) as rt:'."
            )
        return await self._root.start_child(factory, name, restart=restart, shutdown_timeout=shutdown_timeout,
                                            durable=durable, execution_id=execution_id)

    # -- executions ----------------------------------------------------------------

    def _store(self) -> Store:
        if self._root is None:
            raise UsageError("The runtime is not running. Call this inside 'async with Runtime(...) as rt:'.")
        if self.store is None:
            raise ConfigurationError("Executions need a store: Runtime(SQLiteStore(...)) or PostgresStore.")
        return self.store

    async def run(
        self,
        factory: ActorFactory,
        input: JsonValue = None,
        *,
        execution_id: str,
        name: str | None = None,
    ) -> RunResult:
        """Run an execution of a root actor to its end, or to its first pause.

        The root actor receives `Start` with ``input`` and ends the execution with
        ``self.context.finish(output)``. Every actor it spawns durably journals into
        the execution. The execution id is an idempotency key: running an id that
        already completed returns its stored result, one that is paused returns the
        paused result, and one that can make progress here is continued: one whose
        process died (at once when that process is provably dead on this machine,
        else once its lease expires), one with a decision recorded and not yet
        carried out, one started detached.

        Args:
            factory: The root actor's class.
            input: JSON input, delivered as ``Start(input=...)``.
            execution_id: The caller's id for this run.
            name: The root's name (its path is ``<kind>:<name>``); default: its kind.

        Raises:
            LeaseHeld: Another live process is running this execution.
            ConfigurationError: ``name`` is not a valid path segment.
        """
        store = self._store()
        kind = getattr(factory, "kind", "actor")
        name = check_name(kind, name if name is not None else kind)
        root_path = segment(kind, name)
        owner = self._drive_owner(execution_id)
        started = await store.start_execution(
            NewExecution(execution_id=execution_id, runner=getattr(factory, "__qualname__", kind),
                         root_path=root_path, fingerprint=getattr(factory, "fingerprint", ""), input=input),
            owner=owner, lease_seconds=self._settings.lease_seconds,
        )
        if started.created:
            assert started.lease is not None
            _faults.reached("after_start")
            return await self._drive(factory, name, started.lease, Start(input=input), fresh=True)
        execution = started.execution
        if execution.root_path != root_path:
            raise ConfigurationError(
                f"Execution {execution_id!r} was started at {execution.root_path!r}, not {root_path!r}: run it "
                f"with the name it was started with (name={execution.root_path.partition(':')[2]!r}), or use "
                f"another execution id."
            )
        if execution.status not in ("running", "decided", "queued"):
            return await self.result(execution_id)
        check_runner(execution, factory)
        lease = await self._take_over(execution_id, owner)
        if lease is None:
            return await self.result(execution_id)
        return await self._drive(factory, name, lease, Start(input=execution.input))

    def _drive_owner(self, execution_id: str, *, drive: bool = True) -> str:
        """A lease owner for one drive: two drives of one id in this runtime exclude each other.

        After a test's simulated crash, the first drive inherits the dead run's lease
        (a claim only borrows the dead owner's name, to be let past its lease).
        """
        heir = _faults.heirs.pop(execution_id, None) if drive else _faults.heirs.get(execution_id)
        return heir or f"{self._settings.owner}/{tag()}"

    async def resume(
        self,
        factory: ActorFactory,
        execution_id: str,
        value: BaseModel | dict[str, Any] | None = None,
        *,
        path: str | None = None,
        force: bool = False,
        by: str | None = None,
    ) -> RunResult:
        """Continue an execution: with a decision for its pending interrupt, or after a crash.

        With ``value``, the pending interrupt (the only one, or the one at ``path``) is
        claimed in one transaction that also journals the decision; then the execution
        continues here. Without it, the execution is recovered from its journal.
        A resume recorded by a process that died right after its claim is carried
        out by the next recovery, with the same decision.

        The lease of a process that died on this machine is taken over at once
        (tether proves the death from the process table); one held on another
        machine is waited out, unless ``force``: then it is taken regardless, and
        the journal says who forced it. Force only a run whose process you know
        is gone: a live one is fenced out, and its work since its last boundary is lost.

        Args:
            factory: The root actor's class.
            execution_id: Which execution.
            value: The decision; a dict or model that validates as what the suspended
                call expects (a `Resume` by default, which must say ``approved``).
            path: Which pending interrupt, when several are pending.
            force: Take the lease over even from an owner that may be alive.
            by: Who decides (journaled with the decision), e.g. ``"cli:alice"``.

        Raises:
            AlreadyResumed: Someone else claimed this interrupt first; nothing changed.
            NoPendingInterrupt: Nothing is pending at ``path``.
            LeaseHeld: Another live process is running the execution.
            ExecutionNotFound: No such execution.
            ExecutionFinished: It was cancelled (a decision for it is refused).
            pydantic.ValidationError: ``value`` is not a valid decision; nothing was claimed.
        """
        store = self._store()
        execution = await store.get_execution(execution_id)
        if execution is None:
            raise ExecutionNotFound(execution_id)
        if execution.finished and value is None:
            return await self.result(execution_id)
        check_runner(execution, factory)
        name = execution.root_path.partition(":")[2]
        owner = self._drive_owner(execution_id)
        if value is not None:
            await self._claim(execution_id, value, path, owner, force=force, by=by)
        try:
            lease = await self._take_over(execution_id, owner, force=force)
        except LeaseHeld:
            if value is None:
                raise
            # A worker took the decided execution up first: it carries the decision out.
            return await self.result(execution_id)
        if lease is None:
            return await self.result(execution_id)
        return await self._drive(factory, name, lease, Start(input=execution.input))

    async def claim(
        self,
        execution_id: str,
        value: BaseModel | dict[str, Any],
        *,
        path: str | None = None,
        seq: int | None = None,
        by: str | None = None,
    ) -> None:
        """Record a decision for a pending interrupt without continuing the execution here.

        The claim is the same atomic one `resume` makes: afterwards the decision is
        in the journal, the execution is ``decided``, and whichever process next
        takes it up (this one with ``resume(factory, execution_id)``, a worker, an
        application serving decisions, another server) carries it out. For servers
        that answer a request once the decision is safe, and continue the run
        elsewhere. ``seq`` pins the suspension the decider saw: a late click for an
        earlier interrupt at the same path is refused instead of deciding a newer one.

        Raises:
            AlreadyResumed, NoPendingInterrupt, LeaseHeld, ExecutionNotFound: As for `resume`.
            pydantic.ValidationError: ``value`` is not a valid decision; nothing was claimed.
        """
        if await self._store().get_execution(execution_id) is None:
            raise ExecutionNotFound(execution_id)
        owner = self._drive_owner(execution_id, drive=False)
        dead = await self._claim(execution_id, value, path, owner, seq, by=by)
        if dead is not None:
            # Decided past the lease of a process that died running it: nobody here carries it on,
            # so the run is handed over as decided at once, not when that lease would expire.
            lease = await self._take_over(execution_id, f"{self._settings.owner}/{tag()}")
            if lease is not None:
                await self._store().release_lease(lease, status="decided", wake_at=datetime.now(UTC))

    async def _claim(self, execution_id: str, value: BaseModel | dict[str, Any], path: str | None,
                     owner: str, seq: int | None = None, *, force: bool = False, by: str | None = None) -> str | None:
        """Claim with a checked decision; returns the dead (or forced) holder it claimed past, if any."""
        decision = await self._validate_decision(execution_id, value, path)
        store = self._store()
        past = None
        try:
            # Refused (LeaseHeld, nothing consumed) while another process runs the execution.
            await store.claim(execution_id, decision, path=path, seq=seq, owner=owner, by=by)
        except LeaseHeld as held:
            if not (force or is_dead(held.owner)):
                raise
            # Its process is gone: the decision is carried out by whoever takes the lease over.
            await store.claim(execution_id, decision, path=path, seq=seq, owner=held.owner, by=by)
            past = held.owner
        _faults.reached("after_claim")
        return past

    async def _validate_decision(
        self, execution_id: str, value: BaseModel | dict[str, Any], path: str | None
    ) -> dict[str, Any]:
        """Check a decision against the model the suspended call expects, before any claim."""
        data = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
        store = self._store()
        pending = await store.list_pending(execution_id=execution_id, limit=1000)
        target = [p for p in pending if path is None or p.agent_path == path]
        expected: type[BaseModel] = Resume
        if len(target) == 1:
            [suspended] = await store.read_journal(execution_id, after_seq=target[0].seq - 1, limit=1)
            name = suspended.payload.get("expect") if isinstance(suspended.payload, dict) else None
            if isinstance(name, str):
                found = loaded_model(name)
                if found is None:
                    raise ConfigurationError(
                        f"The interrupt of {execution_id!r} at {target[0].agent_path!r} expects a decision of "
                        f"type {name.rpartition(':')[2]} ({name}), which this process does not define, so it "
                        f"cannot check this one; nothing was claimed. Decide from a process that loads the "
                        f"application's code (--app module:attr)."
                    )
                expected = found
        # Raises pydantic.ValidationError; nothing has been claimed yet.
        return expected.model_validate(data).model_dump(mode="json")

    async def _take_over(self, execution_id: str, owner: str, *, force: bool = False) -> Lease | None:
        """Take the execution's lease, or None if it finished meanwhile (another process ran it).

        A lease whose owner provably died on this machine is taken at once, and so is
        any lease when ``force``; either way the journal records the takeover.

        Raises:
            LeaseHeld: A live owner (or one that cannot be judged) holds it, and not ``force``.
        """
        store = self._store()
        try:
            return await take_lease(store, execution_id, owner=owner, lease_seconds=self._settings.lease_seconds,
                                    path=await self._root_path(execution_id), force=force)
        except ExecutionFinished:
            return None

    async def _root_path(self, execution_id: str) -> str:
        execution = await self._store().get_execution(execution_id)
        if execution is None:
            raise ExecutionNotFound(execution_id)
        return execution.root_path

    async def cancel(self, execution_id: str, *, force: bool = False) -> RunResult:
        """Stop a paused (or crashed) execution for good: ``cancelled``, nothing pending.

        The lease of a process that died on this machine is taken over at once; with
        ``force``, any lease is (see `resume`).

        Raises:
            LeaseHeld: A live process is running it; cancel it there.
            ExecutionNotFound: No such execution.
        """
        lease = await self._take_over(execution_id, f"{self._settings.owner}/{tag()}", force=force)
        if lease is not None:
            await self._store().release_lease(lease, status="cancelled")
        return await self.result(execution_id)

    async def result(self, execution_id: str) -> RunResult:
        """Where the execution stands now, from the store."""
        store = self._store()
        execution = await store.get_execution(execution_id)
        if execution is None:
            raise ExecutionNotFound(execution_id)
        pending = await store.list_pending(execution_id=execution_id) if execution.status == "paused" else []
        return RunResult(execution_id=execution_id, status=execution.status, output=execution.result,
                         pending_interrupt=pending[0] if pending else None, pending=pending,
                         error=execution.error)

    async def _drive(self, factory: ActorFactory, name: str, lease: Lease, start: Start, *,
                     fresh: bool = False) -> RunResult:
        """Run the execution's tree until it finishes, pauses or fails, then give up the lease.

        ``start`` goes to the root when its journal shows it never received one (a
        new execution, ``fresh``, or one whose process died before its first
        boundary); otherwise the root continues from its journal.
        The lease is renewed in the background. If another process took it over
        (this one paused too long, or was cut off), the tree stops: its writes
        are refused anyway, and the result is whatever the other process makes.
        """
        assert self._root is not None
        assert self.store is not None
        state = ExecutionState(lease.execution_id, LeaseHolder(self.store, lease))
        group = Group(self._root._tg, "", SupervisionStrategy.ONE_FOR_ONE, 0, 1.0, self._settings, state)
        try:
            async with anyio.create_task_group() as renewal:
                renewal.start_soon(self._keep_lease, state)
                root = await group.start_child(factory, name, restart="temporary", durable=True, root=True,
                                               fresh=fresh)
                if fresh or not root._slot.accepted:
                    await root.send(start)
                await state.done.wait()
                if state.holder.renewing:  # else the keeper ends by itself: a cancel costs a task's repr
                    renewal.cancel_scope.cancel()
        except BaseException as exc:
            fenced = _leaves_are(exc, StaleLease)  # taken over before the tree even started
            with anyio.CancelScope(shield=True):
                await group.stop_all()
                group.close()
                if not (state.lost or fenced):
                    with contextlib.suppress(StoreError):
                        if isinstance(exc, Exception) and not _outage(exc):
                            # It cannot even start (a state that no longer loads, say): a verdict,
                            # or workers would take it up again and again.
                            await self.store.release_lease(state.holder.lease, status="failed",
                                                           error=_describe(exc))
                        else:
                            # Stopped from outside (a worker shutting down, the store away): hand
                            # the lease back, so another process continues from the journal at once.
                            await self.store.release_lease(state.holder.lease)
            if fenced:
                return await self.result(lease.execution_id)  # the other process decides the outcome
            leaf = _tether_leaf(exc)
            if leaf is not None and leaf is not exc:
                raise leaf from exc  # tether's own error, not the task group around it
            raise
        with anyio.CancelScope(shield=True):
            await group.stop_all()
            group.close()
        if state.lost:
            return await self.result(lease.execution_id)
        release = self.store.release_lease
        holder = state.holder
        if state.outcome == "failed" and _outage(state.error):
            # The database went away, not the work: no verdict. The execution stays
            # running, its lease handed back if possible (else it expires), and the
            # next recovery continues it from the journal.
            with contextlib.suppress(StoreError):
                await release(holder.lease)
            raise StoreUnavailable(
                f"Execution {lease.execution_id!r} stopped: the store became unavailable ({state.error}). "
                f"It is intact; recover it (a worker does) once the store is back."
            ) from state.error
        execution_id = lease.execution_id
        try:
            # A verdict this process recorded is answered from what it recorded (the
            # output as the store gives it back: through JSON), not read back.
            if state.outcome == "completed":
                await release(holder.lease, status="completed", result=state.output)
                return RunResult(execution_id=execution_id, status="completed",
                                 output=json.loads(json.dumps(state.output)))
            if state.outcome == "paused":
                await release(holder.lease, status="paused", wake_at=state.wake)
            else:
                error = _describe(state.error)
                await release(holder.lease, status="failed", error=error)
                return RunResult(execution_id=execution_id, status="failed", error=error)
        except StaleLease:
            pass  # taken over meanwhile: the other process decides the outcome
        return await self.result(execution_id)

    async def _keep_lease(self, state: ExecutionState) -> None:
        """Renew the lease until the execution ends, riding out short store outages."""
        lease_seconds = self._settings.lease_seconds
        while not state.done.is_set():
            try:
                await state.holder.keep(lease_seconds, until=state.done)
            except StaleLease as exc:
                state.lost = True
                state.end("failed", error=exc)
                return
            except StoreUnavailable:
                # The database is away for a moment: keep trying. Whether the lease survived
                # is for the next renewal, or the next fenced write, to find out.
                with anyio.move_on_after(lease_seconds / 10):
                    await state.done.wait()

    async def drive(self, factory: ActorFactory, lease: Lease) -> RunResult:
        """Run an execution that `Store.take_work` leased to this process (what workers do).

        A queued execution starts; any other continues from its journal, with the
        decisions recorded for it.

        Raises:
            ConfigurationError: ``factory`` did not start it, or its definition changed.
        """
        store = self._store()
        execution = await store.get_execution(lease.execution_id)
        if execution is None:
            raise ExecutionNotFound(lease.execution_id)
        check_runner(execution, factory)
        return await self._drive(factory, execution.root_path.partition(":")[2], lease,
                                 Start(input=execution.input))

    async def enqueue(
        self,
        factory: ActorFactory,
        input: JsonValue = None,
        *,
        execution_id: str,
        name: str | None = None,
    ) -> RunResult:
        """Record an execution for a worker to start, and return at once (``queued``).

        The id is an idempotency key, as for `run`: enqueuing it again returns
        where it stands.
        """
        kind = getattr(factory, "kind", "actor")
        name = check_name(kind, name if name is not None else kind)
        await self._store().enqueue_execution(
            NewExecution(execution_id=execution_id, runner=getattr(factory, "__qualname__", kind),
                         root_path=segment(kind, name), fingerprint=getattr(factory, "fingerprint", ""),
                         input=input),
        )
        return await self.result(execution_id)


def _leaves(error: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, or the error itself."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def _leaves_are(error: BaseException, kind: type[BaseException]) -> bool:
    return all(isinstance(leaf, kind) for leaf in _leaves(error))


def _tether_leaf(error: BaseException) -> BaseException | None:
    """What to raise instead of a task group's exception group, if anything.

    The first of tether's errors when it holds nothing else, or the only error it
    holds (never a cancellation).
    """
    leaves = _leaves(error)
    if all(isinstance(leaf, TetherError) for leaf in leaves):
        return leaves[0]
    return leaves[0] if len(leaves) == 1 and isinstance(leaves[0], Exception) else None


def _outage(error: BaseException | None) -> bool:
    """Whether a failure comes from the store being unreachable, however deep it is wrapped."""
    seen: set[int] = set()
    pending = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, StoreUnavailable):
            return True
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
        pending += [current.__cause__, current.__context__]
    return False


def check_runner(execution: Execution, factory: ActorFactory) -> None:
    """Refuse to continue an execution with a root it was not started by, or whose definition changed.

    Raises:
        ConfigurationError: Another kind of root, or a different fingerprint
            (the runner's nodes, tools or members changed since the run started).
    """
    kind = execution.root_path.partition(":")[0]
    if kind != getattr(factory, "kind", "actor"):
        raise ConfigurationError(
            f"Execution {execution.execution_id!r} was started by a {kind!r} root ({execution.runner}), "
            f"not by {getattr(factory, '__qualname__', factory)!r}. Resume it with the same runner."
        )
    fingerprint = getattr(factory, "fingerprint", "")
    if execution.fingerprint and fingerprint and fingerprint != execution.fingerprint:
        raise ConfigurationError(
            f"Execution {execution.execution_id!r} was started by {execution.runner} with definition "
            f"{execution.fingerprint}; this process has {fingerprint}. Its nodes, tools or members changed, "
            f"so its journal may not fit: run it with the code that started it, or cancel it."
        )


def _describe(error: BaseException | None) -> str | None:
    """A failed execution's error as stored: the errors themselves, not the group around them."""
    if error is None:
        return None
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(filter(None, (_describe(inner) for inner in error.exceptions)))
    # Stored as text by every store: no NUL characters, no lone surrogates.
    text = f"{type(error).__name__}: {error}".replace("\x00", "\\x00")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
