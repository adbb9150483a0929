"""`Runtime`: hosts actors, and runs and resumes the executions of this process."""

from __future__ import annotations

import contextlib
import json
import logging
import warnings
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Self

import anyio
from tether.runtime._core import telemetry
from tether.runtime._core.actor import check_name, segment
from tether.runtime._core.events import verdict, verdict_of
from tether.runtime._core.execution import STOPPED, ExecutionState, RunResult, Start
from tether.runtime._core.hooks import Hooks, installed, wrapping
from tether.runtime._core.journal import LeaseHolder
from tether.runtime._core.owners import process_owner, tag
from tether.runtime._core.policies import RestartPolicy, SupervisionStrategy
from tether.runtime._core.supervision import Group, Settings
from tether.stores import (
    ConfigurationError,
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

from .service import (
    FORKING,
    HANDED_BACK,
    NOTHING_CLAIMED,
    Executions,
    refuse_misfit,
    refuse_version,
    release_stopped,
    stop_of,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence
    from types import TracebackType

    from pydantic import BaseModel, JsonValue
    from tether.runtime._core._otel import Opened
    from tether.runtime._core.actor import ActorFactory
    from tether.runtime._core.ref import ActorRef, MsgT, ReplyT
    from tether.stores import Execution, JournalEntry


log = logging.getLogger("tether.runtime")


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
        max_restarts: Restart intensity of the top-level actors: crashing more
            often than this within ``within`` seconds raises `SupervisionEscalated`.
        within: The window, in seconds, that ``max_restarts`` counts restarts in.
        clock: What durable timers and approval deadlines read as now (an aware
            datetime); default: the real clock, or the testing kit's `Clock`.
        hooks: Clock, crash points and observers at once (see `Hooks`), for tests.

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
        clock: Callable[[], datetime] | None = None,
        hooks: Hooks | None = None,
    ) -> None:
        hooks = hooks if hooks is not None else installed()
        if clock is not None:
            hooks = hooks.replace(clock=clock)
        self.hooks = hooks
        wrap = wrapping.get()
        if store is not None and wrap is not None:
            store = wrap(store)  # a test's in-process crash: see tether.runtime.testing
        if store is not None and telemetry.resolve() is not None:
            store = telemetry.measured(store)
        self.store = store
        # Each runtime is its own lease owner, so two runtimes in one process exclude each other.
        owner = f"{process_owner()}/{tag()}"
        self.executions: Executions | None = None if store is None else \
            Executions(store, lease_seconds=lease_seconds, hooks=hooks, owner=owner)
        """The execution service over ``store``, which runs and resumes go through."""
        self._settings = Settings(store, mailbox_size, lease_seconds, snapshot_every, owner, hooks)
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
        factory: ActorFactory[MsgT, ReplyT],
        name: str,
        *,
        durable: bool = False,
        execution_id: str | None = None,
        restart: RestartPolicy = "permanent",
        shutdown_timeout: float = 5.0,
    ) -> ActorRef[MsgT, ReplyT]:
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

    def _service(self) -> Executions:
        if self._root is None:
            raise UsageError("The runtime is not running. Call this inside 'async with Runtime(...) as rt:'.")
        if self.executions is None:
            raise ConfigurationError("Executions need a store: Runtime(SQLiteStore(...)) or PostgresStore.")
        return self.executions

    async def run(
        self,
        factory: ActorFactory,
        input: JsonValue = None,
        *,
        execution_id: str,
        name: str | None = None,
        timeout: timedelta | float | None = None,
        thread: str | None = None,
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
            timeout: A deadline for the whole execution (a `timedelta`, or seconds),
                counted from its start on the runtime's clock and kept in the store:
                whether it is running, paused or its process is down then, it ends
                ``timed_out``. Only a new execution takes it; an existing id keeps its own.
            thread: The conversation this execution is a run of, stored with it (see
                ``agent.run(..., thread=...)``).

        Raises:
            LeaseHeld: Another live process is running this execution.
            ConfigurationError: ``name`` is not a valid path segment, or ``timeout`` is not positive.
        """
        service = self._service()
        kind = getattr(factory, "kind", "actor")
        name = check_name(kind, name if name is not None else kind)
        root_path = segment(kind, name)
        owner = service.drive_owner(execution_id)
        runner, version = getattr(factory, "__qualname__", kind), getattr(factory, "version", "")
        # Its span is started first, so that the execution row holds its trace context from the start.
        opened = telemetry.opened("run", execution_id=execution_id, runner=runner, root_path=root_path,
                                  version=version, parent=None)
        started = await service.store.start_execution(
            NewExecution(execution_id=execution_id, runner=runner,
                         root_path=root_path, fingerprint=getattr(factory, "fingerprint", ""),
                         version=version, input=input, deadline=deadline_after(timeout, self.hooks), thread=thread,
                         trace=None if opened is None else opened.traceparent),
            owner=owner, lease_seconds=self._settings.lease_seconds,
        )
        if started.created:
            assert started.lease is not None
            self.hooks.faults.reached("after_start")
            return await self._drive(factory, name, started.lease, Start(input=input), fresh=True, span=opened)
        # The execution was there already: the span opened for a new one is dropped unended (never exported).
        execution = started.execution
        if execution.root_path != root_path:
            raise ConfigurationError(
                f"Execution {execution_id!r} was started at {execution.root_path!r}, not {root_path!r}: run it "
                f"with the name it was started with (name={execution.root_path.partition(':')[2]!r}), or use "
                f"another execution id."
            )
        if thread is not None and execution.thread != thread:
            # Runners that continue threads check this before they start; this is the check no race gets past.
            where = "no thread" if execution.thread is None else f"thread {execution.thread!r}"
            raise ConfigurationError(
                f"Execution {execution_id!r} exists already, as a run of {where}: it cannot be a run of thread "
                f"{thread!r}. Give each run of a thread an id of its own."
            )
        if execution.status not in ("running", "decided", "queued"):
            return await service.result_of(execution)
        changed = execution.fingerprint != getattr(factory, "fingerprint", execution.fingerprint)
        check_runner(execution, factory, await service.store.read_journal(execution_id) if changed else None)
        lease = await service.take_over(execution_id, owner, root_path=root_path)
        if lease is None:
            return await service.result(execution_id)
        fresh = None if lease.epoch == execution.lease_epoch + 1 else await self._checked_again(factory, lease)
        return await self._drive(factory, name, lease, Start(input=execution.input), journal=fresh,
                                 span=_segment("recover", execution))

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

        Before the resumed code runs, a resume makes two store calls: the
        execution and its journal read together, then the claim, which takes the
        lease in its transaction (a lease held by a dead process is taken over
        first, and the takeover journaled).

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
        service = self._service()
        loaded = await service.store.load_execution(execution_id)
        if loaded is None:
            raise ExecutionNotFound(execution_id)
        execution, journal = loaded
        if execution.finished and value is None:
            return await service.result_of(execution)
        check_runner(execution, factory, journal)
        name = execution.root_path.partition(":")[2]
        heir = service.hooks.heirs.get(execution_id)
        owner = service.drive_owner(execution_id)
        lease = None
        if value is not None:
            try:
                decided, lease = await service.decide_leased(execution_id, value, path=path, by=by, force=force,
                                                             owner=owner, journal=journal, lease=True)
            except BaseException:
                # Refused (invalid, already taken, nothing pending): this drive never took the dead
                # run's lease, so the next one inherits it, as it would after a real crash.
                if heir is not None:
                    service.hooks.heirs.setdefault(execution_id, heir)
                raise
            journal.append(decided)
        try:
            if lease is None:
                lease = await service.take_over(execution_id, owner, root_path=execution.root_path, force=force)
        except LeaseHeld:
            if value is None:
                raise
            found = await service.store.get_execution(execution_id)
            if found is not None and found.cancel is not None:
                # A cancel came right after the decision, and holds the lease to end the run:
                # this caller is told the outcome the canceller is.
                return await service.carry_out_cancel(found)
            # A worker took the decided execution up first: it carries the decision out.
            return await service.result(execution_id)
        if lease is None:
            return await service.result(execution_id)
        fresh = journal if lease.epoch == execution.lease_epoch + 1 else await self._checked_again(factory, lease)
        return await self._drive(factory, name, lease, Start(input=execution.input), journal=fresh,
                                 span=_segment(_why(journal), execution, journal))

    async def _checked_again(self, factory: ActorFactory, lease: Lease) -> list[JournalEntry]:
        """The run as it is under ``lease``, checked again: another process held it since it was checked.

        That process wrote what was not read, and may have moved the run to another
        version (a migration). A run this definition can no longer continue is
        given back at once, for a process with its code.
        """
        store = self._service().store
        loaded = await store.load_execution(lease.execution_id)
        if loaded is None:
            raise ExecutionNotFound(lease.execution_id)
        execution, journal = loaded
        try:
            check_runner(execution, factory, journal, ending=HANDED_BACK)
        except ConfigurationError:
            with anyio.CancelScope(shield=True), contextlib.suppress(StoreError):
                await store.release_lease(lease, wake_at=datetime.now(UTC))
            raise
        return journal

    async def decide(
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
        It needs no running runtime: `Executions.decide` does the same with the store alone.

        Raises:
            AlreadyResumed, NoPendingInterrupt, LeaseHeld, ExecutionNotFound: As for `resume`.
            pydantic.ValidationError: ``value`` is not a valid decision; nothing was claimed.
        """
        await self._service().decide(execution_id, value, path=path, seq=seq, by=by)

    async def claim(self, execution_id: str, value: BaseModel | dict[str, Any], *, path: str | None = None,
                    seq: int | None = None, by: str | None = None) -> None:
        """Deprecated name of `decide`."""
        warnings.warn("Runtime.claim() is now Runtime.decide()", DeprecationWarning, stacklevel=2)
        await self.decide(execution_id, value, path=path, seq=seq, by=by)

    async def cancel(self, execution_id: str, *, reason: str = "", by: str | None = None,
                     force: bool = False, wait: float | None = None) -> RunResult:
        """Cancel an execution wherever it runs or waits: see `Executions.cancel`."""
        return await self._service().cancel(execution_id, reason=reason, by=by, force=force, wait=wait)

    async def result(self, execution_id: str) -> RunResult:
        """Where the execution stands now, from the store."""
        return await self._service().result(execution_id)

    async def _drive(self, factory: ActorFactory, name: str, lease: Lease, start: Start, *,
                     fresh: bool = False, journal: list[JournalEntry] | None = None,
                     wait_here: bool = True, span: Opened | None = None) -> RunResult:
        """`_drive_once`, again after each short wait (a retry's backoff) the run parked for.

        The lease is given back for the wait, with the time to wake in the store: if
        this process dies meanwhile, a worker (or the next run) continues at that time.
        ``wait_here=False`` (what workers ask) returns the pause instead. ``span``:
        this handling's, while telemetry is on.
        """
        if span is None:
            result = await self._drive_parts(factory, name, lease, start, fresh=fresh, journal=journal,
                                             wait_here=wait_here)
        else:
            with span.running():
                result = await self._drive_parts(factory, name, lease, start, fresh=fresh, journal=journal,
                                                 wait_here=wait_here)
                span.ended(result.status)
            telemetry.verdict(result.status, getattr(factory, "__qualname__", ""))
        if log.isEnabledFor(logging.DEBUG):
            root_path = segment(getattr(factory, "kind", "actor"), name)
            log.debug("execution %s (%s) is %s here", result.execution_id, root_path, result.status,
                      extra={"execution_id": result.execution_id, "agent_path": root_path, "status": result.status})
        return result

    async def _drive_parts(self, factory: ActorFactory, name: str, lease: Lease, start: Start, *,
                           fresh: bool, journal: list[JournalEntry] | None, wait_here: bool) -> RunResult:
        execution_id = lease.execution_id
        while True:
            result, due = await self._drive_once(factory, name, lease, start, fresh=fresh, journal=journal)
            if due is None or not (wait_here or due <= self.hooks.now()):
                return result
            await anyio.sleep(max(0.0, (due - self.hooks.now()).total_seconds()))
            service = self._service()
            try:
                taken = await service.take_over(execution_id, service.drive_owner(execution_id))
            except LeaseHeld:
                return await self.result(execution_id)  # a worker took it up at its time first
            if taken is None:
                return await self.result(execution_id)
            lease, fresh, journal = taken, False, None

    async def _drive_once(self, factory: ActorFactory, name: str, lease: Lease, start: Start, *,
                          fresh: bool = False, journal: list[JournalEntry] | None = None
                          ) -> tuple[RunResult, datetime | None]:
        """Run the execution's tree until it finishes, pauses or fails, then give up the lease.

        Also returns when to drive it again here, for a pause this process should
        wait out itself (only waits marked so, and no pending interrupt); else None.

        ``start`` goes to the root when its journal shows it never received one (a
        new execution, ``fresh``, or one whose process died before its first
        boundary); otherwise the root continues from its journal.
        The lease is renewed in the background. If another process took it over
        (this one paused too long, or was cut off), the tree stops: its writes
        are refused anyway, and the result is whatever the other process makes.
        """
        assert self._root is not None
        assert self.store is not None
        root_path = segment(getattr(factory, "kind", "actor"), name)
        stop = stop_of(lease, self.hooks.now())
        if stop is not None:  # cancelled, or past its deadline, before anything of it runs here
            await release_stopped(self.store, lease, root_path, *stop)
            return await self.result(lease.execution_id), None
        state = ExecutionState(lease.execution_id, LeaseHolder(self.store, lease, journal))
        group = Group(self._root._tg, "", SupervisionStrategy.ONE_FOR_ONE, 0, 1.0, self._settings, state)
        try:
            async with anyio.create_task_group() as renewal:
                renewal.start_soon(self._keep_lease, state)
                root = await group.start_child(factory, name, restart="temporary", durable=True, root=True,
                                               fresh=fresh)
                if (fresh or not root._slot.accepted) and not state.done.is_set():
                    await root.send(start)
                await state.done.wait()
                if state.outcome in STOPPED:
                    root._slot.scope.cancel()  # at the next await of whatever runs; a shielded() block ends first
                if state.keeping:  # else the keeper ends by itself: a cancel costs a task's repr
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
                            error = _describe(exc)
                            await self.store.release_lease(state.holder.lease, status="failed", error=error,
                                                           entries=[verdict(root_path, "failed", error=error)])
                        else:
                            # Stopped from outside (a worker shutting down, the store away): hand
                            # the lease back, so another process continues from the journal at once.
                            await self.store.release_lease(state.holder.lease)
            if fenced:
                return await self.result(lease.execution_id), None  # the other process decides the outcome
            leaf = _tether_leaf(exc)
            if leaf is not None and leaf is not exc:
                raise leaf from exc  # tether's own error, not the task group around it
            raise
        with anyio.CancelScope(shield=True):
            await group.stop_all()
            group.close()
        if state.lost:
            return await self.result(lease.execution_id), None
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
        again: datetime | None = None
        try:
            # A verdict this process recorded is answered from what it recorded (the
            # output as the store gives it back: through JSON), not read back.
            if state.outcome == "completed":
                await release(holder.lease, status="completed", result=state.output,
                              entries=[*holder.closing, verdict(root_path, "completed", output=state.output)])
                if holder.closing:
                    self.hooks.faults.wrote(holder.closing)
                return RunResult(execution_id=execution_id, status="completed",
                                 output=json.loads(json.dumps(state.output))), None
            if state.outcome == "paused":
                wake = None if state.wake is None else state.wake.isoformat()
                # A worker takes it up at its deadline too, to end it there if nothing else did.
                deadline = holder.lease.deadline
                due = deadline if state.wake is None else state.wake if deadline is None else min(state.wake, deadline)
                waiting = {"waiting": state.waiting} if state.waiting else {}
                await release(holder.lease, status="paused", wake_at=due,
                              entries=[verdict(root_path, "paused", pending=holder.suspended, wake_at=wake,
                                               **waiting)])
                if state.wake_here and not holder.suspended and due == state.wake:
                    again = state.wake
                if state.waiting and await self._message_came(execution_id, state):
                    again = self.hooks.now()  # it came as the run parked: the wake it set was overwritten
            elif state.outcome in STOPPED:
                await release_stopped(self.store, holder.lease, root_path, state.outcome, state.output)
            else:
                error = _describe(state.error)
                unwritten = holder.unwritten()
                await release(holder.lease, status="failed", error=error,
                              entries=[*unwritten, verdict(root_path, "failed", error=error)])
                if unwritten:
                    self.hooks.faults.wrote(unwritten)
                return RunResult(execution_id=execution_id, status="failed", error=error), None
        except StaleLease:
            again = None  # taken over meanwhile: the other process decides the outcome
        return await self.result(execution_id), again

    async def _message_came(self, execution_id: str, state: ExecutionState) -> bool:
        """Whether a message for a waiting actor was journaled after it last read, before the pause committed.

        A message sent after the pause committed marks the run for workers itself; one
        sent between the read and the pause is found here, so none waits unseen.
        """
        assert self.store is not None
        paths = {waiting["path"] for waiting in state.waiting}
        return any(entry.label == "message" and entry.path in paths
                   for entry in await self.store.read_journal(execution_id, after_seq=state.seen))

    async def _keep_lease(self, state: ExecutionState) -> None:
        """Renew the lease until the execution ends, riding out short store outages.

        The keeper also ends the run from outside: when a cancel was asked for (the
        store tells it at once where it can, else the next renewal says so) or the
        deadline passed. It ends the run with that outcome; `_drive` stops the tree.
        """
        assert self.store is not None
        lease_seconds = self._settings.lease_seconds
        holder = state.holder
        state.keeping = True
        try:
            async with self.store.watch_controls(state.execution_id, lambda: state.stirred.set()) as (check, every):
                state.keeping = False
                renew_at = anyio.current_time() + lease_seconds / 3
                while not state.done.is_set():
                    stop = stop_of(holder.lease, self.hooks.now())
                    if stop is not None:
                        state.end(*stop)
                        return
                    wait = min(renew_at - anyio.current_time(), self._until_deadline(holder.lease))
                    with anyio.move_on_after(wait if check is None else min(wait, every)):
                        await state.stirred.wait()
                    if state.done.is_set():
                        return
                    asked, state.stirred = state.stirred.is_set(), anyio.Event()
                    state.keeping = True
                    try:
                        if not (asked or anyio.current_time() >= renew_at or await _asked(check)):
                            continue  # nothing asked, not due: the deadline, or nothing, is looked at above
                        renew_at = anyio.current_time() + lease_seconds / 3
                        holder.lease = await self.store.renew_lease(holder.lease, lease_seconds=lease_seconds)
                    except StaleLease as exc:
                        state.lost = True
                        state.end("failed", error=exc)
                        return
                    except StoreUnavailable:
                        # The database is away for a moment: keep trying. Whether the lease survived
                        # is for the next renewal, or the next fenced write, to find out.
                        with anyio.move_on_after(lease_seconds / 10):
                            await state.done.wait()
                    finally:
                        state.keeping = False
        finally:
            state.keeping = False

    def _until_deadline(self, lease: Lease) -> float:
        """Seconds until the execution's deadline, on the runtime's clock (infinity: none)."""
        if lease.deadline is None:
            return float("inf")
        return max(0.0, (lease.deadline - self.hooks.now()).total_seconds())

    async def drive(self, factory: ActorFactory, lease: Lease, *, execution: Execution | None = None,
                    journal: Sequence[JournalEntry] | None = None) -> RunResult:
        """Run an execution that `Store.take_work` leased to this process (what workers do).

        A queued execution starts; any other continues from its journal, with the
        decisions recorded for it. ``execution`` is its row, and ``journal`` its
        journal, when the caller read them under the lease (`Store.load_execution`).

        Raises:
            ConfigurationError: ``factory`` did not start it, or its definition changed.
            ExecutionNotFound: No such execution.
        """
        store = self._service().store
        if execution is None:
            loaded = await store.load_execution(lease.execution_id)
            if loaded is None:
                raise ExecutionNotFound(lease.execution_id)
            execution, journal = loaded
        elif journal is None:
            journal = await store.read_journal(lease.execution_id)
        check_runner(execution, factory, journal)
        return await self._drive(factory, execution.root_path.partition(":")[2], lease,
                                 Start(input=execution.input), journal=list(journal), wait_here=False,
                                 span=_segment(_why(journal), execution, journal))

    async def enqueue(
        self,
        factory: ActorFactory,
        input: JsonValue = None,
        *,
        execution_id: str,
        name: str | None = None,
        timeout: timedelta | float | None = None,
        thread: str | None = None,
    ) -> RunResult:
        """Record an execution for a worker to start, and return at once (``queued``).

        The id is an idempotency key, as for `run`: enqueuing it again returns
        where it stands. ``timeout`` counts from now, as for `run`.
        """
        kind = getattr(factory, "kind", "actor")
        name = check_name(kind, name if name is not None else kind)
        return await self._service().enqueue(
            NewExecution(execution_id=execution_id, runner=getattr(factory, "__qualname__", kind),
                         root_path=segment(kind, name), fingerprint=getattr(factory, "fingerprint", ""),
                         version=getattr(factory, "version", ""), input=input, deadline=deadline_after(timeout, self.hooks),
                         thread=thread),
        )


def _why(journal: Sequence[JournalEntry]) -> str:
    """What a handling of an execution with this journal does, for its span's name."""
    if not journal:
        return "start"  # a detached start, or a run whose process died before its first boundary
    last = journal[-1]
    if last.kind == "resumed":
        return "resume"  # a decision waits to be carried out
    return "wake" if verdict_of(last) == "paused" else "recover"  # a due timer, or a crashed run


def _segment(why: str, execution: Execution, journal: Sequence[JournalEntry] = ()) -> Opened | None:
    """The span of one more handling of ``execution`` (``resume``, ``recover``, ``start``), in its trace."""
    if telemetry.active is None:
        return None
    if why == "resume":
        decision = next((entry for entry in reversed(journal) if entry.kind == "resumed"), None)
        if decision is not None:
            telemetry.resumed((datetime.now(UTC) - decision.created_at).total_seconds())
    return telemetry.opened(why, execution_id=execution.execution_id, runner=execution.runner,
                            root_path=execution.root_path, version=execution.version, parent=execution.trace)


async def _asked(check: Callable[[], Awaitable[bool]] | None) -> bool:
    """Whether the store's check says a cancel may have been asked (a store that is away says no)."""
    if check is None:
        return False
    try:
        return await check()
    except StoreUnavailable:
        return False


def deadline_after(timeout: timedelta | float | None, hooks: Hooks) -> datetime | None:
    """The deadline of an execution started now with ``timeout`` (seconds, or a span), on the hooks' clock."""
    if timeout is None:
        return None
    span = timeout if isinstance(timeout, timedelta) else timedelta(seconds=timeout)
    if span <= timedelta(0):
        raise ConfigurationError(f"timeout={timeout!r} is not positive: give the execution time to run, "
                                 f"e.g. timeout=timedelta(hours=1), or none (timeout=None).")
    return hooks.now() + span


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


def check_runner(execution: Execution, factory: ActorFactory[Any, Any],
                 journal: Sequence[JournalEntry] | None = None, *, ending: str = NOTHING_CLAIMED) -> None:
    """Refuse to continue an execution with a root it was not started by, another version, or a misfit.

    A run continues on the version it started on. A definition that changed since
    the run started, with the same version (or none), may continue it when its
    journal fits (every node, tool, member and worker it names is still there):
    nodes or tools added, prompts or function bodies changed.

    Raises:
        ConfigurationError: Another kind of root, another version, or a definition
            the journal cannot be replayed against (the message names what is missing).
    """
    kind = execution.root_path.partition(":")[0]
    if kind != getattr(factory, "kind", "actor"):
        raise ConfigurationError(
            f"Execution {execution.execution_id!r} was started by a {kind!r} root ({execution.runner}), "
            f"not by {getattr(factory, '__qualname__', factory)!r}. Resume it with the same runner."
        )
    fingerprint = getattr(factory, "fingerprint", "")
    misfit: Callable[[Sequence[JournalEntry]], str | None] | None = getattr(factory, "misfit", None)
    version = getattr(factory, "version", "")
    if execution.version == FORKING:
        raise ConfigurationError(
            f"Execution {execution.execution_id!r} is a fork that was never finished: the process making it "
            f"died before its journal was written, so nothing of it can run. Fork again with the same id "
            f"(tether fork ... --as {execution.execution_id}) to finish it."
        )
    if execution.version and version != execution.version:
        problem = None if misfit is None or journal is None else misfit(journal)
        raise refuse_version(execution, version, problem, ending)
    if not (execution.fingerprint and fingerprint and fingerprint != execution.fingerprint):
        return
    problem = "its definition changed" if misfit is None or journal is None else misfit(journal)
    if problem is not None:
        raise refuse_misfit(execution, fingerprint, problem, ending)


def _describe(error: BaseException | None) -> str | None:
    """A failed execution's error as stored: the errors themselves, not the group around them."""
    if error is None:
        return None
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(filter(None, (_describe(inner) for inner in error.exceptions)))
    # Stored as text by every store: no NUL characters, no lone surrogates.
    text = f"{type(error).__name__}: {error}".replace("\x00", "\\x00")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
