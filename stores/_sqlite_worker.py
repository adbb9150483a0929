"""Hand a function to aiosqlite's connection thread straight from either backend.

aiosqlite's own `_execute` wraps the outcome in an asyncio future, which under
trio means a second thread (the store's private asyncio loop) between the
caller and the connection. Instead, the function goes onto the connection's
queue with a `_Reply` that the worker thread completes, and that wakes the
waiting task on whichever loop it runs: one crossing each way, on asyncio and
on trio alike. The connection is opened and closed through aiosqlite as usual.

The worker's side of the protocol (aiosqlite 0.22): it takes
``(future, function)`` from ``Connection._tx``, runs ``function()``, then calls
``future.get_loop().call_soon_threadsafe(set_result_or_exception, future, value)``,
whose callback checks ``future.done()`` and then sets the value.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import anyio
import anyio.lowlevel

from ._bridge import rearm_cancellation, threadsafe_scheduler

if TYPE_CHECKING:
    from collections.abc import Callable

    import aiosqlite

T = TypeVar("T")


class _Reply(Generic[T]):
    """Quacks like the asyncio future aiosqlite's worker completes; wakes one task."""

    __slots__ = ("_done", "_error", "_result", "event", "schedule")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.schedule = threadsafe_scheduler()  # the waiting task's loop
        self._done = False
        self._result: Any = None
        self._error: BaseException | None = None

    # -- called on the worker thread --------------------------------------------------

    def get_loop(self) -> _Reply[T]:
        return self

    def call_soon_threadsafe(self, callback: Callable[[_Reply[T], Any], None], _: Any, value: Any) -> None:
        callback(self, value)  # aiosqlite's set_result / set_exception, run right here
        try:
            self.schedule(self.event.set)
        except Exception:  # noqa: BLE001, S110 - the waiting loop is gone; nobody is left to wake
            pass

    def done(self) -> bool:
        return self._done

    def set_result(self, result: T) -> None:
        self._result, self._done = result, True

    def set_exception(self, error: BaseException) -> None:
        self._error, self._done = error, True

    # -- called by the waiting task --------------------------------------------------

    def outcome(self) -> T:
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[no-any-return]


class GroupCommit:
    """The store's connection: reads, and write transactions that share commits.

    Writes are queued here; one job on the connection's thread takes every write
    queued so far and runs them in one transaction, each inside a savepoint of
    its own, so one write's failure (a fenced lease, say) rolls back only that
    write. Every caller learns its outcome after the COMMIT: a write is never
    acknowledged before it is durable. While a transaction commits (the fsync),
    new writes queue up for the next one: under load, one fsync serves many
    boundaries; alone, a write costs what it did.

    Given ``here``, a second connection opened with a zero busy timeout (the
    store does so for ``synchronous=NORMAL``, where a commit writes to the OS and
    does not fsync), a write that finds no batch queued runs on the caller's
    thread instead: two thread wake-ups cost more than such a transaction. Not
    while other tasks keep the loop busy, though: then the thread's transactions
    run beside them on another core, and batch. It never waits there: if the
    write lock is taken, by the thread's connection or another process, SQLite
    says so at once and the write joins the queue, whose connection waits with
    its busy handler. WAL checkpoints, which do fsync, are taken off automatic
    on both connections and run on the thread every `CHECKPOINT_EVERY` writes.
    """

    CHECKPOINT_EVERY = 250  # writes; a few pages each, about SQLite's default of 1000 pages
    RESTART_FRAMES = 2048  # WAL frames (8 MiB of 4 KiB pages) after which a checkpoint makes it start over
    BUSY_LOOP = 0.0002  # seconds other tasks ran during an inline writer's turn: the loop is busy
    SLICE = 0.001  # seconds of inline writes between two turns given to the other tasks

    def __init__(self, conn: aiosqlite.Connection, now: Callable[[], int], *,
                 here: sqlite3.Connection | None = None) -> None:
        self._conn = conn
        self._now = now
        self._here = here
        self._here_in_use = threading.Lock()  # one caller's thread at a time on ``here``
        self._queued: list[tuple[Callable[[sqlite3.Connection, int], Any], _Reply[Any]]] = []
        self._lock = threading.Lock()  # guards the queue and the counters below
        self._job_queued = False
        self._writes_since_checkpoint = 0
        self._checkpoint_queued = False
        # Set when other tasks keep the loop busy: the thread then writes in parallel
        # with them (sqlite3 lets go of the GIL) and batches them; cleared when a
        # batch holds one write again.
        self._loop_busy = False
        self._turn_given = 0.0  # when an inline writer last let the other tasks run

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run the read ``fn(connection)`` on the connection's thread and return its result.

        A cancelled caller just leaves; the read finishes on its thread and its result
        is dropped. (A write's caller waits for the outcome.)
        """
        await anyio.lowlevel.checkpoint_if_cancelled()
        reply: _Reply[T] = _Reply()
        self._conn._tx.put_nowait((reply, partial(fn, self._conn._conn)))  # type: ignore[arg-type]
        await reply.event.wait()
        return reply.outcome()

    async def write(self, fn: Callable[[sqlite3.Connection, int], T], *, one_statement: bool = False) -> T:
        """Run ``fn(db, now)`` in a shared transaction; return once that transaction committed.

        ``one_statement`` says that ``fn`` writes with a single statement, stepped to
        its end: on the caller's thread SQLite then commits it by itself, which
        saves the BEGIN and the COMMIT (a tenth of an inline write). Statements
        refused before it (a constraint fails) wrote nothing and do not count.
        """
        if self._here is None:
            await anyio.lowlevel.checkpoint_if_cancelled()
        else:
            # Inline writes give the other tasks a turn once per slice, not at every write:
            # a turn resumes the writer's whole stack of coroutines, which costs a third as
            # much as the transaction. It comes before the write, so a cancellation it
            # delivers leaves nothing written; between turns, a cancellation is checked.
            inline = not (self._loop_busy or self._job_queued)  # decided before the turn
            before = time.perf_counter()
            if before - self._turn_given >= self.SLICE:
                await anyio.lowlevel.checkpoint()
                self._turn_given = time.perf_counter()
                if self._turn_given - before > self.BUSY_LOOP:
                    # Other tasks ran that long: this write and the next go beside them. (Many
                    # writers resuming in one loop iteration, each with a write of its own on
                    # the loop, would hold it for all of theirs: 40-50 ms for 100 starting runs.)
                    self._loop_busy = True
                    inline = False
            else:
                await anyio.lowlevel.checkpoint_if_cancelled()
            if inline:  # a batch queued meanwhile holds the lock, and the write joins it below
                try:
                    result = self._write_here(self._here, fn, one_statement)
                except _LockTaken:
                    pass  # another connection is writing: queue behind it
                else:
                    self._count_writes(1)
                    return result
        reply: _Reply[T] = _Reply()
        with self._lock:
            self._queued.append((fn, reply))
            start_job = not self._job_queued
            self._job_queued = True
        if start_job:
            self._run_on_thread(self._run_batches)
        return await _wait_committed(reply)

    def _run_on_thread(self, job: Callable[[], None]) -> None:
        """Queue ``job`` on the connection's thread, with no reply: it tells its callers itself.

        (With a reply, aiosqlite's thread would wake the loop once more for nothing.)
        """
        self._conn._tx.put_nowait((None, job))

    def close_here(self) -> None:
        """Close the caller-side connection (not the last one: it never checkpoints)."""
        here, self._here = self._here, None
        if here is not None:
            with self._here_in_use:
                here.close()

    def _write_here(self, db: sqlite3.Connection, fn: Callable[[sqlite3.Connection, int], T],
                    one_statement: bool) -> T:
        """One transaction on the caller's thread, or `_LockTaken` without waiting."""
        if not self._here_in_use.acquire(blocking=False):
            raise _LockTaken  # another event loop's thread is in it
        try:
            if one_statement:
                # Its own transaction: it takes the write lock (or finds it taken, at once:
                # busy_timeout 0) and commits as it completes; if it fails, nothing was written.
                # (As after any COMMIT, an exception raised asynchronously in between, such as
                # KeyboardInterrupt, may find it committed: there is no ROLLBACK to run here.)
                try:
                    return fn(db, self._now())
                except sqlite3.OperationalError as exc:
                    if _is_busy(exc):
                        raise _LockTaken from None
                    raise
            try:
                db.execute("BEGIN IMMEDIATE")  # busy_timeout 0: fails at once if taken
            except sqlite3.OperationalError as exc:
                if _is_busy(exc):
                    raise _LockTaken from None
                raise
            try:
                result = fn(db, self._now())
                db.execute("COMMIT")
            except BaseException:
                _roll_back(db)
                raise
            return result
        finally:
            self._here_in_use.release()

    def _run_batches(self) -> None:
        """On the connection's thread: commit batches until none is queued."""
        while True:
            with self._lock:
                batch, self._queued = self._queued, []
                if not batch:
                    self._job_queued = False
                    return
            try:
                self._commit(self._conn._conn, batch)
            except BaseException as exc:  # noqa: BLE001 - nothing may leave a caller waiting forever
                for _, reply in batch:
                    if not reply.done():
                        reply.call_soon_threadsafe(_deliver, reply, (False, exc))
            if len(batch) == 1:
                self._loop_busy = False
            if self._here is not None and self._checkpoint_due(len(batch)):
                self._checkpoint()  # already on the thread, and inline writes are queuing

    def _count_writes(self, count: int) -> None:
        """After writes made on the caller's thread: queue a checkpoint when one is due."""
        if self._checkpoint_due(count):
            self._run_on_thread(self._checkpoint)

    def _checkpoint_due(self, count: int) -> bool:
        """Count writes; true once per `CHECKPOINT_EVERY`, and not again before that one ran."""
        with self._lock:
            self._writes_since_checkpoint += count
            if self._writes_since_checkpoint < self.CHECKPOINT_EVERY or self._checkpoint_queued:
                return False
            self._checkpoint_queued = True
            return True

    def _checkpoint(self) -> None:
        """On the connection's thread: copy the WAL into the database (this one fsyncs).

        It runs while writes go on. The WAL starts over from its beginning only
        after a checkpoint that caught up with it, which a steady stream of inline
        writes never lets happen. So once the WAL holds `RESTART_FRAMES`, a second
        pass copies what was written meanwhile with the caller-side connection
        held: a write arriving then queues for the thread until that pass's fsync
        is done (a few milliseconds, so only every few thousand writes).
        """
        db = self._conn._conn
        try:
            # A checkpoint that fails (busy readers elsewhere, say) only leaves the work to the
            # next one. Nothing it raises may end `_run_batches`, which would leave the queue
            # marked as served and every later write waiting.
            with contextlib.suppress(Exception):
                [(_, frames, _)] = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                if frames >= self.RESTART_FRAMES:
                    with self._here_in_use:
                        db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        finally:
            with self._lock:
                self._writes_since_checkpoint = 0
                self._checkpoint_queued = False

    def _commit(self, db: sqlite3.Connection, batch: list[tuple[Callable[[sqlite3.Connection, int], Any], _Reply[Any]]]) -> None:
        """Commit a batch and tell every caller its outcome, waking each loop once."""
        writes = [fn for fn, _ in batch]
        try:
            outcomes = self._transaction(db, writes, guarded=False)
        except _WriteFailed:
            # One write failed: do the batch again with each write in a savepoint of
            # its own, so that only the failed one is undone. (Failures are rare; the
            # savepoints would cost two statements per write every time.)
            outcomes = self._transaction(db, writes, guarded=True)
        waiting: dict[Callable[[Callable[[], object]], object], list[anyio.Event]] = {}
        for (_, reply), (ok, value) in zip(batch, outcomes, strict=True):
            _deliver(reply, (ok, value))
            waiting.setdefault(reply.schedule, []).append(reply.event)
        for schedule, events in waiting.items():
            with contextlib.suppress(Exception):  # that loop is gone; nobody is left to wake
                schedule(partial(_wake_in_turns, schedule, events))

    def _transaction(self, db: sqlite3.Connection, writes: list[Callable[[sqlite3.Connection, int], Any]], *,
                     guarded: bool) -> list[tuple[bool, Any]]:
        """One transaction for all ``writes``; their outcomes, or `_WriteFailed` (unguarded, several)."""
        outcomes: list[tuple[bool, Any]] = []
        try:
            db.execute("BEGIN IMMEDIATE")
            for fn in writes:
                if guarded:
                    db.execute("SAVEPOINT tether_write")
                try:
                    outcomes.append((True, fn(db, self._now())))
                except Exception as exc:
                    if not guarded:
                        if len(writes) > 1:
                            raise _WriteFailed from exc
                        raise
                    db.execute("ROLLBACK TO tether_write")  # this write's own failure: keep the others
                    outcomes.append((False, exc))
                if guarded:
                    db.execute("RELEASE tether_write")
            db.execute("COMMIT")
        except BaseException as exc:  # whatever it was, every caller must hear it
            _roll_back(db)
            if isinstance(exc, _WriteFailed):
                raise
            outcomes = [(False, exc)] * len(writes)
        return outcomes


def _roll_back(db: sqlite3.Connection) -> None:
    """End a failed transaction, if it is still open."""
    if db.in_transaction:
        with contextlib.suppress(sqlite3.Error):  # the connection's own state says the rest
            db.execute("ROLLBACK")


class _WriteFailed(Exception):
    """A write of an unguarded batch failed; the batch was rolled back, to be run guarded."""


WAKE_PER_TURN = 8


def _wake_in_turns(schedule: Callable[[Callable[[], object]], object], events: list[anyio.Event]) -> None:
    """On the loop: wake a few of a batch's writers, and the rest on the loop's next turns.

    Woken all at once, a hundred writers would each run up to their next write in
    one turn of the loop, and timers and I/O would wait for all of them. (A
    callback scheduled from a callback runs on the next turn, in asyncio and trio.)
    """
    for event in events[:WAKE_PER_TURN]:
        event.set()
    if len(events) > WAKE_PER_TURN:
        schedule(partial(_wake_in_turns, schedule, events[WAKE_PER_TURN:]))


class _LockTaken(Exception):
    """The write lock is another connection's: this write waits on the thread instead."""


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(exc)  # pragma: no cover - sqlite3 before Python 3.11


def _deliver(reply: _Reply[Any], outcome: tuple[bool, Any]) -> None:
    ok, value = outcome
    if ok:
        reply.set_result(value)
    else:
        reply.set_exception(value)


async def _wait_committed(reply: _Reply[T]) -> T:
    """Wait for a queued write's outcome; a cancelled caller still waits for it (it will commit or not).

    A shield stops anyio's cancellation, not asyncio's own Task.cancel(): those are
    absorbed until the outcome is in, so a committed write is never reported lost,
    and the cancellation is delivered afterwards.
    """
    try:
        await reply.event.wait()
    except anyio.get_cancelled_exc_class():
        while not reply.event.is_set():
            try:
                with anyio.CancelScope(shield=True):
                    await reply.event.wait()
            except anyio.get_cancelled_exc_class():
                pass
        rearm_cancellation()
    return reply.outcome()
