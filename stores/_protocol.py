"""The `Store` contract that every backend fulfils.

Each method is one transaction. Each either commits wholly or not at all, and
that holds under cancellation too: a call that returns has committed, a call
cancelled before its commit raises the cancellation and changed nothing.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Protocol, Self

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Mapping, Sequence
    from contextlib import AbstractAsyncContextManager, AbstractContextManager
    from datetime import datetime
    from types import TracebackType

    from pydantic import JsonValue

    from ._models import (
        Execution,
        ExecutionSearch,
        ExecutionStatus,
        IdempotencyRecord,
        JournalEntry,
        Lease,
        NewEntry,
        NewExecution,
        NewInterrupt,
        PendingInterrupt,
        QueueLimits,
        QueueStats,
        ScheduleRow,
        StartResult,
        ThreadSummary,
        TokenRow,
    )

from ._errors import ConfigurationError, ExecutionFinished, LeaseHeld
from ._models import FINAL_STATUSES
from ._watch import Check, Committed, JournalWatch, Watchers

SCHEMA_VERSION = 14
"""The schema version this release writes; `setup()` migrates older databases to it."""


class Listener(Protocol):
    """Notifications of runnable work, from `Store.listen`, until closed."""

    @property
    def closed(self) -> bool:
        """True once notifications stopped by themselves (a dropped connection): listen again."""

    async def aclose(self) -> None:
        """Stop listening. Close a listener before the store it came from."""


class Store(ABC):
    """Where executions, their journals and pending interrupts live.

    A store is an async context manager: ``async with SQLiteStore("app.db") as
    store:`` opens it and applies migrations, and leaving the block closes it. It
    also opens itself on first use, and `aclose()` closes it; a script that never
    closes it still exits promptly.
    """

    async def __aenter__(self) -> Self:
        await self.setup()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    @abstractmethod
    async def setup(self) -> None:
        """Open the store and apply missing schema migrations.

        Safe to call any number of times, from any number of processes at once.
        A store opened with ``create=False`` (the operator's read commands) creates
        and migrates nothing: it opens an existing tether store of this version, or
        raises.

        Raises:
            StoreUnavailable: The database cannot be reached.
            StoreNotFound: ``create=False``, and there is no tether store there.
            StoreCorrupted: The database is not a tether store or is damaged.
            SchemaVersionError: The database was written by a newer tether (or, with
                ``create=False``, an older one).
        """

    @abstractmethod
    async def aclose(self) -> None:
        """Close connections and threads. Closing twice does nothing."""

    # -- executions --------------------------------------------------------

    @abstractmethod
    async def start_execution(
        self, new: NewExecution, *, owner: str, lease_seconds: float
    ) -> StartResult:
        """Create the execution, or return the existing one with that id.

        A created execution is ``running`` and leased to ``owner`` (epoch 1). An
        existing one is returned unchanged and without a lease: the id is an
        idempotency key, and what to do with a completed, paused or running
        execution is the caller's decision.
        """

    @abstractmethod
    async def enqueue_execution(self, new: NewExecution) -> StartResult:
        """Create the execution ``queued`` for a worker to start, or return the existing one.

        Nothing runs here and no lease is taken: `take_work` hands it to a worker.
        """

    @abstractmethod
    async def take_work(
        self, *, owner: str, lease_seconds: float, limit: int, roots: Sequence[str] | None = None,
        versions: Mapping[str, Sequence[str]] | None = None,
    ) -> list[Lease]:
        """Lease up to ``limit`` executions a worker should run now, atomically.

        Those are: queued or paused ones whose ``wake_at`` has come (a decision
        was claimed, a timer is due, a detached start), and running ones whose
        lease expired or was handed back (their process died or stopped). Only
        executions whose root path is in ``roots`` (the runners the worker has),
        when given; and with ``versions`` (root path -> the versions the worker
        has of it), an execution that started on a version is taken only by a
        worker with that version (one on no version, by any). Each is leased to ``owner`` with a new epoch, marked
        ``running``, and its ``wake_at`` cleared. Concurrent callers, in any
        number of processes, never get the same execution.
        """

    @abstractmethod
    async def declare_queue(self, limits: QueueLimits) -> None:
        """Record a queue's limits (replacing what was recorded for its name): claims read them from here."""

    @abstractmethod
    async def take_queued(
        self, queue: str, *, owner: str, lease_seconds: float, limit: int, roots: Sequence[str] | None = None,
        versions: Mapping[str, Sequence[str]] | None = None,
    ) -> list[Lease]:
        """Lease up to ``limit`` ready executions of ``queue``, as its limits admit them, atomically.

        What is ready is as for `take_work`, which leaves executions with a queue
        to this. Under a lock on the queue's row, one transaction counts what the
        queue runs (executions of it leased now, by any process; an expired lease
        frees its slot) and what it started in its rate period, then leases the
        first ready ones by priority (lower first), then age, within
        ``concurrency``, ``per_key`` and, for starts, the rate. A queue never
        declared admits nothing.
        """

    @abstractmethod
    async def queue_stats(self) -> list[QueueStats]:
        """Each declared queue's waiting, running and admitted executions, by key (key None: the whole queue)."""

    @abstractmethod
    async def declare_schedule(self, schedule: ScheduleRow) -> ScheduleRow:
        """Record a schedule's definition and return the row as stored.

        A new schedule is stored as given (its ``last_tick``: from when it counts).
        A known one takes the new definition and keeps its ``last_tick`` and
        ``paused``: redeclaring it (each worker does, at start) never re-runs a tick.
        """

    @abstractmethod
    async def list_schedules(self) -> list[ScheduleRow]:
        """Every schedule recorded, by name."""

    @abstractmethod
    async def advance_schedule(self, name: str, *, seen: datetime, to: datetime) -> bool:
        """Move the schedule's ``last_tick`` from ``seen`` to ``to``; False if it was not ``seen`` (another moved it)."""

    @abstractmethod
    async def pause_schedule(self, name: str, *, paused: bool, now: datetime) -> ScheduleRow | None:
        """Pause or resume a schedule; resumed, it counts from ``now`` (what came due while paused is skipped).

        Returns the row, or None when no schedule has that name.
        """

    @abstractmethod
    async def take_llm_quota(self, name: str, *, requests: int | None, tokens: int | None,
                             per_seconds: float) -> float:
        """Count one call against the limit ``name``, if it has room now; else how long to wait.

        The limit counts, fleet-wide, the calls and the tokens of the current
        window of ``per_seconds`` (windows start at multiples of it on the
        store's clock). Returns 0 when the call was counted; otherwise the seconds
        until the window ends, or until a block (`block_llm`) lifts.
        """

    @abstractmethod
    async def add_llm_tokens(self, name: str, tokens: int, *, per_seconds: float) -> None:
        """Count ``tokens`` used by a call against the limit ``name``'s current window."""

    @abstractmethod
    async def block_llm(self, name: str, seconds: float) -> None:
        """Let no call through the limit ``name`` for ``seconds`` (a provider said 429, Retry-After)."""

    @abstractmethod
    async def request_cancel(self, execution_id: str, *, by: str, reason: str) -> Execution | None:
        """Ask for the execution to be cancelled, and return its row as the request left it.

        Recorded on the execution (``cancel``: ``{"by", "reason", "at"}``) unless it is
        finished, or a cancel is asked for already (the first request stands). Whoever
        holds or next takes the lease carries it out: the leases `acquire_lease`,
        `renew_lease` and `take_work` hand out carry the request. One that nobody
        runs (queued, paused, decided) is marked for workers at once (``wake_at``),
        so that it is cancelled even if the caller dies now. A holder in another
        process is told (Postgres: ``NOTIFY``; SQLite: a check, see `watch_controls`;
        otherwise at its next renewal), and
        one of this store object at once (see `watch_controls`). None if there is
        no such execution.
        """

    @abstractmethod
    async def get_execution(self, execution_id: str) -> Execution | None:
        """Return the execution, or None if there is none with that id."""

    async def load_execution(self, execution_id: str) -> tuple[Execution, list[JournalEntry]] | None:
        """The execution and its whole journal, read together: what a resume needs first.

        One read transaction, so the journal is the row's: nothing committed
        between the two is seen by one and not the other. None if there is no
        such execution.
        """
        execution = await self.get_execution(execution_id)
        if execution is None:
            return None
        return execution, await self.read_journal(execution_id)

    @abstractmethod
    async def list_executions(
        self,
        *,
        status: ExecutionStatus | None = None,
        limit: int = 100,
        after: Execution | None = None,
        recent: bool = False,
        thread: str | None = None,
    ) -> list[Execution]:
        """List executions oldest first; pass the last one of a page as ``after``.

        With ``recent``, the most recently updated first, across the whole table
        (pages by ``updated_at``: an execution updated meanwhile moves up). With
        ``thread``, only the runs of that conversation.
        """

    @abstractmethod
    async def search_executions(
        self, search: ExecutionSearch | None = None, *, limit: int = 50, before: Execution | None = None
    ) -> list[Execution]:
        """Executions that match ``search``, newest created first; pass a page's last one as ``before``.

        Pages by ``(created_at, execution_id)``, which never change, so a page
        never repeats or skips a row however the executions move meanwhile.
        """

    @abstractmethod
    async def create_token(self, token: TokenRow) -> None:
        """Keep a new access token.

        Raises:
            ConfigurationError: A token that is not revoked already has this name
                (a revoked one's name may be used again).
        """

    @abstractmethod
    async def find_token(self, digest: str) -> TokenRow | None:
        """The token whose secret hashes to ``digest``; None if there is none or it was revoked."""

    @abstractmethod
    async def list_tokens(self) -> list[TokenRow]:
        """Every token, revoked ones too, by name then age."""

    @abstractmethod
    async def revoke_token(self, name: str, *, at: datetime) -> bool:
        """Revoke the live token of this name from ``at`` on; False if there is none."""

    @abstractmethod
    async def list_threads(self, *, limit: int = 100, after: str | None = None) -> list[ThreadSummary]:
        """The conversations of this store, by name; pass the last name of a page as ``after``."""

    @abstractmethod
    async def reopen(self, execution_id: str, *, by: str) -> Execution:
        """Make a failed execution one to continue from its journal: a retry, in one transaction.

        Its status becomes ``running`` with no lease held (as a run whose process
        stopped: a recovery, or a worker, continues it at once), its error goes, and
        a ``retried`` entry at its root journals ``by``. Returns the row as it left it.

        Raises:
            ExecutionNotFound: No such execution.
            NotFailed: It is not ``failed``; nothing was changed.
        """

    # -- leases ----------------------------------------------------------------

    @abstractmethod
    async def acquire_lease(
        self, execution_id: str, *, owner: str, lease_seconds: float, replacing: str | None = None
    ) -> Lease:
        """Take the execution's lease with a new epoch, and mark it ``running``.

        Succeeds when nobody holds the lease, when it expired, when ``owner``
        already holds it, or when ``replacing`` holds it: the caller proved that
        owner's process dead, or an operator forces the takeover. Every success
        fences out all earlier epochs, so a writer that comes back is refused. The
        lease carries the execution's deadline and any cancel asked for.

        Raises:
            ExecutionNotFound: No such execution.
            ExecutionFinished: It is completed, failed or cancelled.
            LeaseHeld: Another owner holds a lease that has not expired.
        """

    @abstractmethod
    async def renew_lease(self, lease: Lease, *, lease_seconds: float) -> Lease:
        """Extend the lease's expiry, keeping its epoch; the lease returned carries any cancel asked for.

        Raises:
            StaleLease: The lease was taken over; stop working on the execution.
        """

    @abstractmethod
    async def release_lease(
        self,
        lease: Lease,
        *,
        status: ExecutionStatus | None = None,
        result: JsonValue = None,
        error: str | None = None,
        entries: Sequence[NewEntry] = (),
        wake_at: datetime | None = None,
    ) -> list[int]:
        """Append final ``entries``, set ``status``, and give the lease up, atomically.

        ``result`` and ``error`` are stored with a final status (completed, failed,
        cancelled), which also deletes any pending interrupt left. ``wake_at``
        asks a worker to take the execution up again then (a timer). Returns the
        sequence numbers of ``entries``.

        Raises:
            StaleLease: The lease was taken over; nothing was written.
        """

    @abstractmethod
    async def rewrite(
        self,
        lease: Lease,
        journal: Sequence[JournalEntry],
        *,
        pending: Sequence[PendingInterrupt],
        version: str,
        fingerprint: str,
    ) -> None:
        """Replace an execution's journal, its pending interrupts and its version, atomically.

        What a migration writes: every entry of ``journal`` keeps its ``seq`` and
        time, every pending row its ``seq``, deadline and time; entries appended
        later are numbered after the last. The lease stays held.

        Raises:
            StaleLease: The lease was taken over; nothing was written.
        """

    # -- journal -----------------------------------------------------------

    @abstractmethod
    async def append(self, lease: Lease, entries: Sequence[NewEntry]) -> list[int]:
        """Append journal entries, returning the sequence numbers assigned to them.

        Sequence numbers are assigned inside the write transaction, consecutive
        per execution, never from a client clock.

        Raises:
            StaleLease: The lease was taken over; nothing was written.
            SerializationError: A payload is not JSON; nothing was written.
        """

    @abstractmethod
    async def read_journal(
        self, execution_id: str, *, after_seq: int = 0, limit: int | None = None
    ) -> list[JournalEntry]:
        """Return the execution's journal entries with ``seq > after_seq``, in order."""

    @abstractmethod
    async def suspend(
        self, lease: Lease, entries: Sequence[NewEntry], interrupt: NewInterrupt
    ) -> PendingInterrupt:
        """Append ``entries`` and record the pending interrupt, in one transaction.

        ``entries`` are the suspending actor's snapshot and its ``suspended``
        checkpoint; the pending row points at the last of them.

        Raises:
            StaleLease: The lease was taken over; nothing was written.
            DuplicateInterrupt: Something is already pending at that path.
        """

    @abstractmethod
    async def claim(
        self,
        execution_id: str,
        value: JsonValue,
        *,
        path: str | None = None,
        seq: int | None = None,
        owner: str | None = None,
        by: str | None = None,
    ) -> JournalEntry:
        """Consume a pending interrupt and journal the decision, in one transaction.

        Deletes the pending row and appends a ``resumed`` entry at the interrupt's
        path whose payload is ``{"value": value, "suspended_seq": ..., "reason":
        ...}``. Exactly one of any number of concurrent claimers, in any number of
        processes, succeeds. ``path`` may be omitted when exactly one interrupt is
        pending. ``seq`` (the pending row's) pins one suspension: an Approve click
        for an interrupt that was resumed and suspended again at the same path
        gets `AlreadyResumed` instead of approving the new one.

        While another process than ``owner`` holds a live lease (the execution is
        running there), nothing is claimed: a decision must not be consumed by a
        caller that cannot carry it out. A claim marks the execution for workers
        (``wake_at``), turns a ``paused`` execution ``decided``, and journals ``by``
        (who decided: ``"deadline"``, ``"cli:alice"``) with the decision.

        Raises:
            AlreadyResumed: Another claimer consumed it first.
            LeaseHeld: Another live process runs the execution; nothing was claimed.
            NoPendingInterrupt: Nothing is (or ever was) pending there.
            ExecutionNotFound: No such execution.
        """

    async def claim_and_lease(
        self,
        execution_id: str,
        value: JsonValue,
        *,
        owner: str,
        lease_seconds: float,
        path: str | None = None,
        seq: int | None = None,
        by: str | None = None,
    ) -> tuple[JournalEntry, Lease | None]:
        """`claim`, and take the execution's lease for ``owner``, who carries the decision out.

        What a resume in this process does: one transaction where the store can
        (SQLite and Postgres), so the resumed code waits one round trip less. The
        lease is taken as `acquire_lease` takes it, and the execution is then
        ``running`` under it rather than ``decided`` for a worker. This default
        makes the two calls; between them another process may take the decided
        execution up, or cancel it: then the lease is None, and the decision is
        claimed and journaled for whoever runs it.

        Raises:
            AlreadyResumed: As `claim`: someone else claimed it first; nothing changed.
            NoPendingInterrupt: Nothing is pending at ``path``.
            LeaseHeld: Another live process holds the lease; nothing is consumed.
            ExecutionFinished: It was cancelled.
            ExecutionNotFound: No such execution.
        """
        entry = await self.claim(execution_id, value, path=path, seq=seq, owner=owner, by=by)
        try:
            lease = await self.acquire_lease(execution_id, owner=owner, lease_seconds=lease_seconds)
        except (LeaseHeld, ExecutionFinished):
            return entry, None
        return entry, lease

    @abstractmethod
    async def deliver_message(self, execution_id: str, path: str, message: JsonValue, *, by: str) -> JournalEntry:
        """Put a message into the mailbox of the actor at ``path``, in one transaction: a durable message.

        Journals it (label ``message``, at ``path``, payload ``{"message": ..., "by": ...}``)
        with no lease needed, in the order messages come, and marks the execution
        for workers (``wake_at``), so that a run parked waiting for a message is
        taken up. Whoever runs the actor reads it from the journal.

        Raises:
            ExecutionNotFound: No such execution.
            ExecutionFinished: It is completed, failed, cancelled or timed out; nothing was written.
            SerializationError: ``message`` is not JSON; nothing was written.
        """

    @abstractmethod
    async def list_pending(
        self,
        *,
        execution_id: str | None = None,
        path_prefix: str | None = None,
        limit: int = 100,
        after: PendingInterrupt | None = None,
        due_before: datetime | None = None,
    ) -> list[PendingInterrupt]:
        """List pending interrupts oldest first, optionally by execution or path prefix.

        ``path_prefix`` is a plain string prefix: ``"supervisor:planner/"`` finds
        every interrupt under that supervisor. Pass the last row of a page as
        ``after`` to get the next one. ``due_before`` keeps only those whose
        deadline has passed by then.
        """

    @abstractmethod
    async def count_pending(
        self, *, execution_id: str | None = None, path_prefix: str | None = None
    ) -> int:
        """Count pending interrupts with the same filters as `list_pending`."""

    # -- idempotency -------------------------------------------------------

    @abstractmethod
    async def get_idempotent(self, execution_id: str, key: str) -> IdempotencyRecord | None:
        """Return the recorded result for ``key``, or None."""

    @abstractmethod
    async def list_idempotent(self, execution_id: str) -> list[IdempotencyRecord]:
        """Every recorded result of an execution, by key (what a fork that reuses effects copies)."""

    @abstractmethod
    async def put_idempotent(self, lease: Lease, key: str, value: JsonValue) -> IdempotencyRecord:
        """Record a result for ``key``; the first record wins and is returned.

        Raises:
            StaleLease: The lease was taken over; nothing was written.
        """

    # -- maintenance -------------------------------------------------------

    @abstractmethod
    async def delete_execution(self, execution_id: str) -> bool:
        """Delete an execution with its journal, pending rows and records.

        Returns whether it existed.
        """

    @abstractmethod
    async def prune(self, *, older_than: datetime, statuses: Sequence[ExecutionStatus] | None = None,
                    limit: int | None = None) -> int:
        """Delete finished executions last updated before ``older_than``.

        Never touches a running or paused execution. The runs of a thread are kept
        while any of them is not old enough (each run reads the conversation of the
        ones before it): they go together. ``statuses``: only those of these final
        statuses; ``limit``: at most that many, the oldest first, so that a large
        cleanup goes in small transactions. Returns how many were deleted.

        Raises:
            ConfigurationError: ``statuses`` names one that is not final, or ``limit`` is below 1.
        """

    async def check(self) -> list[str]:
        """Run a full consistency check of the database, on demand (``tether doctor``).

        Slow on a large database: it reads everything. Changes nothing.

        Returns:
            What is wrong, one line per problem; empty when the store is sound.
        """
        return []

    # -- workers -------------------------------------------------------------

    async def listen(self, on_work: Callable[[], object]) -> Listener | None:
        """Call ``on_work`` whenever an execution may have become runnable, until the listener is closed.

        Runnable means what `take_work` hands out: a decision was claimed, a timer
        is due, a detached start, in whatever process or machine wrote it. A worker
        listens so that it wakes at once, and keeps a slow poll behind it.
        ``on_work`` runs on the caller's event loop and must not block. A store
        that cannot notify returns None (the default; SQLite, memory): its
        workers only poll. A listener whose ``closed`` turns true has stopped
        notifying: listen again.

        Raises:
            StoreUnavailable: Notifications cannot be set up now; poll, and try again later.
        """
        return None

    # -- followers -----------------------------------------------------------

    @property
    def identity(self) -> object:
        """The data this store object opens: equal for two store objects on the same database.

        Live events of a run reach the followers in this process of the same
        execution id on the same data, not those of another database that
        happens to hold the same id. By default, the object itself.
        """
        return self

    _watchers: Watchers | None = None
    _controlled: dict[str, set[Callable[[], object]]] | None = None

    @contextlib.asynccontextmanager
    async def watch_controls(self, execution_id: str, on_request: Callable[[], object]
                             ) -> AsyncIterator[tuple[Check | None, float]]:
        """Call ``on_request`` when a control request (a cancel) for ``execution_id`` may have come, while the block runs.

        What a lease holder uses to stop at once rather than at its next renewal:
        a request made through this store object calls it at once, one from
        another process through the database where it can notify (Postgres
        ``LISTEN``). Where it cannot, the block gets a cheap check to ask every so
        often, and its interval (SQLite: whether another connection committed, and
        then whether a cancel is recorded); else ``(None, 0.0)``. A call or a true
        check may be spurious; the holder renews its lease to learn what was asked
        (`Lease.cancel`). ``on_request`` runs on the caller's event loop and must
        not block.
        """
        if self._controlled is None:
            self._controlled = {}
        callbacks = self._controlled.setdefault(execution_id, set())
        callbacks.add(on_request)
        try:
            async with self._control_source(execution_id) as source:
                yield source
        finally:
            callbacks.discard(on_request)
            if not callbacks:
                del self._controlled[execution_id]

    def _control_source(self, execution_id: str) -> AbstractAsyncContextManager[tuple[Check | None, float]]:
        """How a holder learns of other processes' control requests: a check and its interval (None: it is told)."""
        return contextlib.nullcontext((None, 0.0))

    def _control_requested(self, execution_id: str) -> None:
        """Tell this store object's holders of ``execution_id``: call after committing a control request."""
        for callback in list((self._controlled or {}).get(execution_id, ())):
            callback()

    @contextlib.asynccontextmanager
    async def watch(self, execution_id: str, *, elsewhere: bool = True) -> AsyncIterator[JournalWatch]:
        """Be woken when the journal of ``execution_id`` may have grown, while the block runs.

        Whoever wrote it: this store object (at once), another process or machine
        (Postgres: ``LISTEN``, no polling; SQLite: a ``PRAGMA data_version`` check
        every few milliseconds, one tiny query, never a busy loop). Open the watch,
        then read the journal after your cursor, then ``await watch.wait()`` and read
        again: nothing committed after the watch opened can be missed. A wake may be
        spurious (another execution's write, on SQLite); the read after it then
        finds nothing. ``elsewhere=False`` listens to this store object alone (for a
        run that this process drives, which nobody else may write to meanwhile).

        Example:
            ```python
            async with store.watch(execution_id) as watch:
                while True:
                    for entry in await store.read_journal(execution_id, after_seq=seen):
                        seen = entry.seq
                        print(entry.label)
                    await watch.wait()
            ```
        """
        source = self._change_source(execution_id) if elsewhere else contextlib.nullcontext((None, 0.0))
        async with source as (check, interval):
            watch = JournalWatch(execution_id, check, interval)
            if self._watchers is None:
                self._watchers = Watchers()
            self._watchers.add(watch)
            try:
                yield watch
            finally:
                self._watchers.discard(watch)

    def _change_source(self, execution_id: str) -> AbstractAsyncContextManager[tuple[Check | None, float]]:
        """How a watch learns of other writers: a periodic check and its interval (None: it need not).

        A store that does not say is re-read every half second by its followers.
        """
        return contextlib.nullcontext((_always, 0.5))

    def _journal_grew(self, execution_id: str, upto: int | None = None, entries: Committed | None = None) -> None:
        """Wake this store's watches of ``execution_id``: call after a commit that appended to its journal.

        ``upto``: the last sequence number it wrote, when known; ``entries``: what it
        wrote, as `read_journal` would return it (made only if a watch wants it), so a
        follower in this process need not read it back.
        """
        watchers = self._watchers
        if watchers:
            watchers.poke(execution_id, upto, entries)

    def worker_slot(self) -> AbstractContextManager[None]:
        """Hold this process's place among the store's workers, for a ``with`` block.

        A store that supports one worker process at a time (SQLite, per file)
        refuses a second one at once, in whatever process it asks; the slot is
        given back when the block exits or the process dies. Others (the default:
        Postgres, memory) admit any number and hold nothing. A worker takes its
        slot before it takes work, and holds it while it runs.

        Example:
            ```python
            with store.worker_slot():  # raises at once if another worker has the file
                await worker.serve()
            ```

        Raises:
            ConfigurationError: Another worker process holds the only slot.
        """
        return contextlib.nullcontext()


def version_pairs(versions: Mapping[str, Sequence[str]]) -> list[str]:
    """``{root: [version, ...]}`` as the stores match it: each root and version joined by a unit separator."""
    return [f"{root}\x1f{version}" for root, alike in versions.items() for version in alike]


def check_limit(limit: int | None) -> None:
    """Refuse a page size that the stores would read differently."""
    if limit is not None and limit < 0:
        raise ConfigurationError(f"limit={limit} is negative; pass a count of rows, or None for all.")


_LAST = 0x10FFFF  # the highest code point
_SURROGATES = range(0xD800, 0xE000)  # never in stored text (`Text` refuses them)


def prefix_range(prefix: str) -> tuple[str, str | None]:
    """The strings that start with ``prefix``, as ``low <= s < high`` in code point order.

    ``high`` is ``prefix`` with its last code point moved up by one (a last
    U+10FFFF is dropped and the one before it moved up; surrogates are stepped
    over). That bound is exact, where ``prefix || U+10FFFF`` would miss a value
    whose next character is U+10FFFF itself. None: no upper bound (the prefix
    is all U+10FFFF). SQLite's BINARY collation and Postgres's ``"C"`` compare
    UTF-8 bytes, whose order is code point order, so the range is the same in
    each store, case-sensitive and exact, and an index serves it (LIKE would not:
    it ignores ASCII case in SQLite, and depends on the collation in Postgres).
    """
    head = prefix
    while head and ord(head[-1]) == _LAST:
        head = head[:-1]
    if not head:
        return prefix, None
    following = ord(head[-1]) + 1
    if following in _SURROGATES:
        following = _SURROGATES.stop
    return prefix, head[:-1] + chr(following)


FEW_UNDER_PREFIX = 1000
"""Pending interrupts under a path prefix that are few enough to read through the path index.

A listing counts up to this many in the path index first. Fewer: it reads them
there and sorts them by age (a rare member's dozen, wherever they lie in time).
This many or more: it walks the age index and keeps those under the prefix; at
that density the first page is found long before the end. Either way a listing
reads at most about this many index entries plus a page of rows.
"""


def ancestors(path: str) -> list[str]:
    """The paths above ``path`` in its tree: ``a:x/b:y/c:z`` -> ``a:x``, ``a:x/b:y`` (``a:x/`` -> ``a:x``)."""
    parts = path.split("/")
    return [above for above in ("/".join(parts[:k]) for k in range(1, len(parts))) if above]


def matches(execution: Execution, search: ExecutionSearch) -> bool:
    """Whether ``execution`` is one that ``search`` lists: the meaning the databases' queries implement."""
    s = search
    return ((s.status is None or execution.status == s.status)
            and (s.root_path is None or execution.root_path == s.root_path)
            and (s.version is None or execution.version == s.version)
            and (s.thread is None or execution.thread == s.thread)
            and (s.since is None or execution.created_at >= s.since)
            and (s.until is None or execution.created_at < s.until)
            and (not s.id_prefix or execution.execution_id.startswith(s.id_prefix))
            and (not s.path_prefix or execution.root_path.startswith(s.path_prefix)
                 or execution.root_path in ancestors(s.path_prefix)))


def token_named(name: str) -> ConfigurationError:
    """Why `Store.create_token` refused a name: a live token has it."""
    return ConfigurationError(f"A token named {name!r} exists: revoke it first (tether tokens revoke {name}) "
                              f"or pick another name.")


def token_digest_taken() -> ConfigurationError:
    """Why `Store.create_token` refused a digest: a token (live or revoked) has it, so its secret is not new."""
    return ConfigurationError("A token with this digest exists (revoked tokens keep theirs): "
                              "make the new token with a new secret.")


async def _always() -> bool:
    return True


def prunable(statuses: Sequence[str] | None, limit: int | None) -> list[str]:
    """The final statuses a prune may delete, checked (and its ``limit``)."""
    if limit is not None and limit < 1:
        raise ConfigurationError(f"limit={limit}: prune at least 1 execution per call, or None for all.")
    if statuses is None:
        return sorted(FINAL_STATUSES)
    wrong = [status for status in statuses if status not in FINAL_STATUSES]
    if wrong:
        raise ConfigurationError(f"Cannot prune {wrong!r}: only finished executions go, "
                                 f"of {', '.join(sorted(FINAL_STATUSES))}.")
    return list(statuses)
