"""The execution service: what is done to an execution with the store alone, no actor tree.

Deciding a pending interrupt, cancelling, reading where a run stands and taking
a lease over are a few store calls each, and open no task group. A `Runtime`
uses the same service when it runs and resumes executions; an operator, a
server or a worker use it directly.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import BaseModel
from tether.runtime._core import telemetry
from tether.runtime._core.events import verdict
from tether.runtime._core.execution import RunResult
from tether.runtime._core.hooks import Hooks, installed
from tether.runtime._core.interrupt import Resume, loaded_model
from tether.runtime._core.journal import operator_name, take_lease
from tether.runtime._core.owners import is_dead, process_owner, tag
from tether.stores import ConfigurationError, ExecutionFinished, ExecutionNotFound, LeaseHeld, StaleLease

if TYPE_CHECKING:
    from tether.runtime._core.execution import Outcome
    from tether.stores import Execution, JournalEntry, Lease, NewExecution, Store


class Executions:
    """The executions of one store, as a process that may hold their leases acts on them.

    Args:
        store: Where the executions live.
        lease_seconds: How long a lease this service takes lasts without renewal.
        hooks: The clock and crash points (see `Runtime`); default: the installed ones.
        owner: This process's lease owner name (default: one naming this process).
    """

    def __init__(self, store: Store, *, lease_seconds: float = 30.0, hooks: Hooks | None = None,
                 owner: str | None = None) -> None:
        self.store = store
        self.lease_seconds = lease_seconds
        self.hooks: Hooks = hooks if hooks is not None else installed()
        # The process's identity leads the name: a run it held when it died is taken over
        # at once by a recovery on the same machine (see _core/owners.py).
        self.owner: str = owner or f"{process_owner()}/{tag()}"

    def drive_owner(self, execution_id: str, *, drive: bool = True) -> str:
        """A lease owner for one drive: two drives of one id in this process exclude each other.

        After a test's simulated crash, the first drive inherits the dead run's lease
        (a decision only borrows the dead owner's name, to be let past its lease).
        """
        heirs = self.hooks.heirs
        heir = heirs.pop(execution_id, None) if drive else heirs.get(execution_id)
        return heir or f"{self.owner}/{tag()}"

    async def decide(
        self,
        execution_id: str,
        value: BaseModel | dict[str, Any],
        *,
        path: str | None = None,
        seq: int | None = None,
        by: str | None = None,
        force: bool = False,
        owner: str | None = None,
        journal: list[JournalEntry] | None = None,
    ) -> JournalEntry:
        """Record a decision for a pending interrupt: checked, claimed once, journaled.

        The decision is validated against the model the suspended call expects
        (read from its journal, or from ``journal`` when the caller already read
        it) before anything is claimed. Afterwards the execution is ``decided``
        and whichever process next takes it up carries the decision out. A
        decision claimed past the lease of a process that provably died (or
        any, with ``force``) is carried out by whoever takes the lease over;
        without an ``owner`` that will, the run is handed over as decided at once.

        Returns:
            The ``resumed`` journal entry the claim wrote.

        Raises:
            AlreadyResumed: Someone else claimed this interrupt first; nothing changed.
            NoPendingInterrupt: Nothing is pending at ``path``.
            LeaseHeld: Another live process runs the execution.
            ExecutionNotFound: No such execution.
            ExecutionFinished: It was cancelled or timed out (a decision for it is refused), or a
                cancel came first and has ended it.
            ConfigurationError: The expected decision type is not defined in this process.
            pydantic.ValidationError: ``value`` is not a valid decision; nothing was claimed.
        """
        entry, _ = await self.decide_leased(execution_id, value, path=path, seq=seq, by=by, force=force,
                                            owner=owner, journal=journal)
        return entry

    async def decide_leased(
        self,
        execution_id: str,
        value: BaseModel | dict[str, Any],
        *,
        path: str | None = None,
        seq: int | None = None,
        by: str | None = None,
        force: bool = False,
        owner: str | None = None,
        journal: list[JournalEntry] | None = None,
        lease: bool = False,
    ) -> tuple[JournalEntry, Lease | None]:
        """`decide`; with ``lease``, ``owner`` also takes the execution's lease in the claim's transaction.

        The lease is None when it was not taken with the claim (not asked, or the
        execution's lease had to be taken over): the caller takes it as usual.
        """
        if journal is None:
            journal = await self.store.read_journal(execution_id)
        decision = self._checked(execution_id, value, path, seq, journal)
        carrier = owner or self.drive_owner(execution_id, drive=False)
        try:
            if lease:
                entry, taken = await self.store.claim_and_lease(execution_id, decision, owner=carrier,
                                                                lease_seconds=self.lease_seconds,
                                                                path=path, seq=seq, by=by)
            else:
                entry, taken = await self.store.claim(execution_id, decision, path=path, seq=seq,
                                                      owner=carrier, by=by), None
        except LeaseHeld as held:
            if not (force or is_dead(held.owner)):
                await self._refuse_if_cancelling(execution_id)
                raise
            # Its process is gone: the decision is carried out by whoever takes the lease over.
            entry = await self.store.claim(execution_id, decision, path=path, seq=seq, owner=held.owner, by=by)
            self.hooks.faults.reached("after_claim")
            if owner is None:
                # Nobody here carries it on: hand the run over as decided now, not when that lease expires.
                taken = await self.take_over(execution_id, f"{self.owner}/{tag()}", force=force)
                if taken is not None:
                    await self.store.release_lease(taken, status="decided", wake_at=datetime.now(UTC))
            return entry, None
        self.hooks.faults.reached("after_claim")
        return entry, taken

    async def _refuse_if_cancelling(self, execution_id: str) -> None:
        """A lease held to carry out a cancel (or that ended the run since): refuse the decision with its outcome."""
        found = await self.store.get_execution(execution_id)
        if found is not None and found.finished:
            raise ExecutionFinished(execution_id, found.status)
        if found is not None and found.cancel is not None:
            ended = await self.carry_out_cancel(found)
            raise ExecutionFinished(execution_id, ended.status)

    def _checked(self, execution_id: str, value: BaseModel | dict[str, Any], path: str | None, seq: int | None,
                 journal: list[JournalEntry]) -> dict[str, Any]:
        """The decision as JSON, checked against the model its suspended call expects."""
        data = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
        waiting = [(entry.seq, entry.payload) for entry in _pending_suspensions(journal)
                   if (path is None or entry.payload.get("path") == path) and (seq is None or entry.seq == seq)]
        if len({str(payload.get("path")) for _, payload in waiting}) == 1:
            # One call: asked again after a resume that did not get this far (a fork, say), the newest asks.
            waiting = waiting[-1:]
        asked = [payload for _, payload in waiting]
        expected: type[BaseModel] = Resume
        if len(asked) == 1:
            name = asked[0].get("expect")
            if isinstance(name, str):
                found = loaded_model(name)
                if found is None:
                    raise ConfigurationError(
                        f"The interrupt of {execution_id!r} at {asked[0].get('path')!r} expects a decision of "
                        f"type {name.rpartition(':')[2]} ({name}), which this process does not define, so it "
                        f"cannot check this one; nothing was claimed. Decide from a process that loads the "
                        f"application's code (--app module:attr)."
                    )
                expected = found
        # Raises pydantic.ValidationError; nothing has been claimed yet.
        return expected.model_validate(data).model_dump(mode="json")

    async def take_over(self, execution_id: str, owner: str, *, root_path: str | None = None,
                        force: bool = False) -> Lease | None:
        """Take the execution's lease, or None if it finished meanwhile (another process ran it).

        A lease whose owner provably died on this machine is taken at once, and so is
        any lease when ``force``; either way the journal records the takeover, at
        ``root_path`` (looked up when not given).

        Raises:
            LeaseHeld: A live owner (or one that cannot be judged) holds it, and not ``force``.
            ExecutionNotFound: No such execution.
        """
        if root_path is None:
            execution = await self.store.get_execution(execution_id)
            if execution is None:
                raise ExecutionNotFound(execution_id)
            root_path = execution.root_path
        try:
            return await take_lease(self.store, execution_id, owner=owner, lease_seconds=self.lease_seconds,
                                    path=root_path, force=force)
        except ExecutionFinished:
            return None

    async def cancel(self, execution_id: str, *, reason: str = "", by: str | None = None,
                     force: bool = False, wait: float | None = None) -> RunResult:
        """Cancel an execution for good, wherever it runs or waits: ``cancelled``, nothing pending.

        The request is recorded first, in one transaction, so it holds whatever
        happens next: the first request stands, and whoever holds or next takes the
        execution carries it out. A paused, decided, queued or sleeping execution
        is cancelled here and now. A running one is stopped by the process that
        runs it, which is told (Postgres: at once, by ``NOTIFY``; SQLite: within
        ``SQLiteStore.control_interval``; at the latest at its next lease renewal) and cancels what it runs at its
        next ``await``; a `shielded` block is let finish first. A holder that has
        hung is waited out until its lease lapses, then cancelled from here.

        Racing a resume, a recovery or a worker, there is one outcome and both
        callers are told it: a decision claimed before the cancel is carried out
        by nobody (the run ends ``cancelled``); one that comes once the cancel is
        recorded, carried out yet or not, is refused (`ExecutionFinished`) and consumes nothing. The journal's verdict says who cancelled and why.

        Args:
            execution_id: Which execution.
            reason: Why, for the journal and the operators (``"customer withdrew"``).
            by: Who (``"cli:alice"``); default: ``"python:<user>"`` of this process.
            force: Take over a lease held elsewhere at once (see `Runtime.resume`).
            wait: Seconds to wait at most for a running execution to stop (None: until
                it has stopped; 0: not at all, the result then says ``running``).

        Returns:
            Where the execution stands: ``cancelled``, or the verdict it reached
            first (``completed``, ``failed``, ``timed_out``), or ``running`` when it
            was still stopping once ``wait`` ran out.

        Raises:
            ExecutionNotFound: No such execution.
        """
        who = by if by is not None else f"python:{operator_name()}"
        execution = await self.store.request_cancel(execution_id, by=who, reason=reason)
        if execution is None:
            raise ExecutionNotFound(execution_id)
        if execution.finished:
            return await self.result_of(execution)
        return await self.carry_out_cancel(execution, force=force, wait=wait)

    async def carry_out_cancel(self, execution: Execution, *, force: bool = False,
                               wait: float | None = None) -> RunResult:
        """Cancel ``execution``, whose cancel is recorded, here; or wait for its holder (or its lease's end) to.

        ``wait`` bounds only the wait for a live holder (see `cancel`).
        """
        execution_id = execution.execution_id
        owner = self.drive_owner(execution_id)  # a run known dead (a test's crash) is taken over at once
        give_up = None if wait is None else anyio.current_time() + wait
        while True:
            try:
                lease = await self.take_over(execution_id, owner, root_path=execution.root_path, force=force)
            except LeaseHeld as held:
                left = None if give_up is None else give_up - anyio.current_time()
                if left is not None and left <= 0:
                    return await self.result(execution_id)
                with anyio.move_on_after(float("inf") if left is None else left):
                    await self._wait_stopped(execution_id, held.expires_at)
                continue
            if lease is not None:
                stop = stop_of(lease, self.hooks.now())
                assert stop is not None  # the lease carries the request recorded above
                try:
                    await release_stopped(self.store, lease, execution.root_path, *stop)
                except StaleLease:
                    pass  # taken over meanwhile (a worker, a resume): it carries the cancel out
            found = await self.store.get_execution(execution_id)
            if found is None:
                raise ExecutionNotFound(execution_id)
            if found.finished:
                return await self.result_of(found)

    async def _wait_stopped(self, execution_id: str, until: datetime) -> None:
        """Wait until the execution has a verdict, or until ``until`` (its holder's lease runs out)."""
        async with self.store.watch(execution_id) as watch:
            with anyio.move_on_after(max(0.0, (until - datetime.now(UTC)).total_seconds()) + 0.05):
                while True:
                    found = await self.store.get_execution(execution_id)
                    if found is None or found.finished:
                        return
                    await watch.wait()

    async def retry(self, execution_id: str, *, by: str | None = None) -> RunResult:
        """Make a failed execution continue from its last good boundary, and leave it to be carried on.

        Its finished steps are not run again: the step that failed runs again (and
        whatever came after it). The store alone is used: the execution is
        ``running`` with its lease handed back, so the next recovery carries it on
        (a worker does at once; `Runner.retry` does it here). The journal says who
        retried it.

        Raises:
            ExecutionNotFound: No such execution.
            NotFailed: It did not fail; nothing was changed.
        """
        reopened = await self.store.reopen(execution_id, by=by if by is not None else f"python:{operator_name()}")
        return await self.result_of(reopened)

    async def result(self, execution_id: str) -> RunResult:
        """Where the execution stands now, from the store.

        Raises:
            ExecutionNotFound: No such execution.
        """
        execution = await self.store.get_execution(execution_id)
        if execution is None:
            raise ExecutionNotFound(execution_id)
        return await self.result_of(execution)

    async def result_of(self, execution: Execution) -> RunResult:
        """`result` for an execution row already read."""
        paused = execution.status == "paused"
        pending = await self.store.list_pending(execution_id=execution.execution_id) if paused else []
        return RunResult(execution_id=execution.execution_id, status=execution.status, output=execution.result,
                         pending_interrupt=pending[0] if pending else None, pending=pending,
                         error=execution.error)

    async def enqueue(self, new: NewExecution) -> RunResult:
        """Record an execution for a worker to start (``queued``); an id already known is left as it is.

        While telemetry is on, the execution's trace starts here, in the caller's
        trace: the worker that starts it continues it.
        """
        opened = telemetry.opened("enqueue", execution_id=new.execution_id, runner=new.runner,
                                  root_path=new.root_path, version=new.version, parent=None)
        if opened is None:
            return await self.result_of((await self.store.enqueue_execution(new)).execution)
        with opened.running():
            started = await self.store.enqueue_execution(new.model_copy(update={"trace": opened.traceparent}))
            opened.ended(started.execution.status)
        return await self.result_of(started.execution)


def stop_of(lease: Lease, now: datetime) -> tuple[Outcome, dict[str, Any]] | None:
    """What ends the run held by ``lease`` from outside, now: a cancel asked for, or its deadline passed.

    The outcome and its verdict's payload; None when the run may go on.
    """
    if isinstance(lease.cancel, dict):
        return "cancelled", {"by": lease.cancel.get("by"), "reason": lease.cancel.get("reason")}
    if lease.deadline is not None and now >= lease.deadline:
        return "timed_out", {"deadline": lease.deadline.isoformat()}
    return None


async def release_stopped(store: Store, lease: Lease, root_path: str, outcome: Outcome,
                          payload: dict[str, Any]) -> None:
    """End a cancelled or timed-out run: its verdict, its status, its pending rows gone, in one transaction."""
    if outcome == "cancelled":
        reason = f": {payload['reason']}" if payload.get("reason") else ""
        error = f"Cancelled by {payload.get('by')}{reason}"
    else:
        error = f"Timed out: its deadline {payload.get('deadline')} passed before it finished"
    await store.release_lease(lease, status=outcome, error=error, entries=[verdict(root_path, outcome, **payload)])


FORKING = "fork in progress"
"""The version of a fork while it is being made: no runner has it (a version has no spaces)."""


NOTHING_CLAIMED = "Nothing was claimed."
HANDED_BACK = "Its decisions stay recorded, for a process with its code to carry out."


def refuse_misfit(execution: Execution, fingerprint: str, problem: str,
                  ending: str = NOTHING_CLAIMED) -> ConfigurationError:
    """The refusal of a definition ``execution``'s journal does not fit, naming what is missing."""
    return ConfigurationError(
        f"Execution {execution.execution_id!r} cannot continue on this definition of {execution.root_path} "
        f"({fingerprint}; it started on {execution.fingerprint}): {problem}. Its nodes, tools or members "
        f"changed in a way its journal cannot be replayed against: continue it with the code that "
        f"started it, or cancel it. {ending}"
    )


def refuse_version(execution: Execution, version: str, problem: str | None,
                   ending: str = NOTHING_CLAIMED) -> ConfigurationError:
    """The refusal to continue ``execution`` on another version than its own, with whether its journal fits."""
    here = f"version {version!r}" if version else "a definition without a version"
    fits = (f", which does not fit its journal: {problem}" if problem is not None
            else ", whose definition fits its journal")
    move = (f"migrate it: tether migrate {execution.execution_id} --to {version} (with a migration registered "
            f"with @runner.migrate(from_version={execution.version!r}) if its journal needs one)") if version \
        else "give this definition a version and migrate the run to it"
    return ConfigurationError(
        f"Execution {execution.execution_id!r} is on version {execution.version!r} of "
        f"{execution.root_path}, and this process has {here}{fits}. Load version {execution.version!r} "
        f"beside it (an --app list may hold both), or {move}. {ending}"
    )


def _pending_suspensions(journal: list[JournalEntry]) -> list[Any]:
    """The ``suspended`` entries no ``resumed`` entry answered yet, oldest first.

    Only to pick the model a decision is checked against: whether one is still
    pending is the claim's to say, in its transaction.
    """
    answered = {entry.payload.get("suspended_seq") for entry in journal
                if entry.kind == "resumed" and isinstance(entry.payload, dict)}
    return [entry for entry in journal
            if entry.kind == "suspended" and isinstance(entry.payload, dict) and entry.seq not in answered]
