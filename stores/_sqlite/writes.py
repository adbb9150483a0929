"""Where the SQLite store's writes run: `WritePolicy` decides, `GroupCommit` carries it out."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import anyio
import anyio.lowlevel

from .._bridge import rearm_cancellation
from ._aiosqlite import Reply, call, connection_of, post

if TYPE_CHECKING:
    import aiosqlite

    from .opening import OpenedFile

T = TypeVar("T")
Synchronous = Literal["FULL", "NORMAL"]
Write = Callable[[sqlite3.Connection, int], T]
"""A write: ``fn(connection, now)``, run inside a transaction; ``now`` in microseconds."""


class WritePolicy:
    """The rules for where a write runs and when the WAL is checkpointed.

    1. At ``synchronous=FULL`` every write goes to the connection's thread: its
       commit fsyncs, and nothing that waits may run on the event loop's thread.
    2. Writes on the thread share transactions (group commit): one job takes
       every write queued so far and commits them together, each acknowledged
       only after that COMMIT. While one batch fsyncs the next one fills, so
       under load one fsync serves many boundaries; alone, a write costs what it did.
    3. At ``synchronous=NORMAL`` a commit writes to the OS and does not fsync
       (about 15 us), which is cheaper than two thread wake-ups. So a write runs
       *inline*, on the caller's thread, on a second connection whose busy timeout
       is zero, when no batch is queued for the thread and the loop is not busy.
       It never waits there: if the write lock is taken (by the thread or another
       process), SQLite says so at once and the write joins the queue (rule 2).
    4. An inline writer gives the other tasks a turn once per `SLICE` seconds of
       inline writes, not at every write (a turn costs a third of a transaction).
       If they ran for longer than `BUSY_LOOP` meanwhile, the loop is *busy*: this
       write and the next go to the thread, which runs them beside those tasks
       (sqlite3 lets go of the GIL) and batches them. The loop counts as idle again
       once a batch holds a single write.
    5. At ``NORMAL``, WAL checkpoints (which fsync) are off automatic on both
       connections and run on the thread every `CHECKPOINT_EVERY` writes. The WAL
       starts over only after a checkpoint that caught up with it, which a steady
       stream of inline writes never lets happen; so once it holds
       `RESTART_FRAMES`, a second pass runs with the inline connection held (a
       write then queues for the thread until that pass's fsync is done). At
       ``FULL``, SQLite's automatic checkpoints run on the thread, after commits.

    One policy serves one open store; its numbers are class attributes, so that
    a test can move them.
    """

    SLICE = 0.001  # seconds of inline writes between two turns given to the other tasks
    BUSY_LOOP = 0.0002  # seconds other tasks ran during an inline writer's turn: the loop is busy
    CHECKPOINT_EVERY = 250  # writes; a few pages each, about SQLite's default of 1000 pages
    RESTART_FRAMES = 2048  # WAL frames (8 MiB of 4 KiB pages) after which the WAL is made to start over

    def __init__(self, synchronous: Synchronous) -> None:
        self.inline = synchronous == "NORMAL"
        """Whether writes may run on the caller's thread (rule 3), and checkpoints are the store's (5)."""
        self._loop_busy = False
        self._turn_given = 0.0  # when an inline writer last let the other tasks run

    def may_write_inline(self, batch_queued: bool) -> bool:
        """Rule 3, decided before the writer's turn: no batch is queued, and the loop is not busy."""
        return not (self._loop_busy or batch_queued)

    def turn_due(self, now: float) -> bool:
        """Rule 4: whether an inline writer gives the other tasks a turn now."""
        return now - self._turn_given >= self.SLICE

    def turn_taken(self, started: float, ended: float) -> bool:
        """Record a turn the other tasks had (rule 4); true if it shows the loop busy.

        Then this write and the next go to the thread. (Many writers resuming in
        one loop iteration, each with a write of its own on the loop, would hold
        it for all of theirs: 40-50 ms for 100 starting runs.)
        """
        self._turn_given = ended
        if ended - started > self.BUSY_LOOP:
            self._loop_busy = True
            return True
        return False

    def batch_committed(self, size: int) -> None:
        """Rule 4: a batch of one write means the thread keeps up; the loop counts as idle."""
        if size == 1:
            self._loop_busy = False

    def checkpoint_due(self, writes: int) -> bool:
        """Rule 5: whether ``writes`` since the last checkpoint call for the next one."""
        return writes >= self.CHECKPOINT_EVERY

    def restart_due(self, frames: int) -> bool:
        """Rule 5: whether a WAL of ``frames`` after a checkpoint needs the pass that lets it start over."""
        return frames >= self.RESTART_FRAMES


class GroupCommit:
    """The store's connection: reads, and writes where its `WritePolicy` sends them.

    Writes queued for the thread run in one transaction per batch. Each runs in a
    savepoint of its own only when one of them fails (a fenced lease, say): the
    batch is then run again guarded, so that one write's failure rolls back only
    that write. Every caller learns its outcome after the COMMIT: a write is
    never acknowledged before it is durable.

    ``here`` is the inline connection of rule 3 (opened by the store when the
    policy says ``inline``); ``now`` gives each transaction its time. Every
    transaction checks that ``file`` is still where the store opened it before it
    commits, and rolls back if not.
    """

    def __init__(self, conn: aiosqlite.Connection, now: Callable[[], int], policy: WritePolicy,
                 file: OpenedFile, *, here: sqlite3.Connection | None = None) -> None:
        self._conn = conn
        self._file = file
        self._now = now
        self.policy = policy
        self._here = here
        self._here_in_use = threading.Lock()  # one caller's thread at a time on ``here``
        self._queued: list[tuple[Write[Any], Reply[Any]]] = []
        self._lock = threading.Lock()  # guards the queue and the counters below
        self._job_queued = False
        self._writes_since_checkpoint = 0
        self._checkpoint_queued = False

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run the read ``fn(connection)`` on the connection's thread and return its result.

        A cancelled caller just leaves; the read finishes on its thread and its result
        is dropped. (A write's caller waits for the outcome.)
        """
        return await call(self._conn, fn)

    async def write(self, fn: Write[T], *, one_statement: bool = False) -> T:
        """Run ``fn(db, now)`` in a transaction, return once it committed (inline, or on the thread).

        ``one_statement`` says that ``fn`` writes with a single statement, stepped to
        its end: inline, SQLite then commits it by itself, which saves the BEGIN and
        the COMMIT (a tenth of an inline write). Statements refused before it (a
        constraint fails) wrote nothing and do not count.
        """
        if self._here is None:
            await anyio.lowlevel.checkpoint_if_cancelled()
        else:
            policy = self.policy
            # The turn comes before the write, so a cancellation it delivers leaves nothing
            # written; between turns, a cancellation is checked.
            inline = policy.may_write_inline(self._job_queued)  # decided before the turn
            before = time.perf_counter()
            if policy.turn_due(before):
                await anyio.lowlevel.checkpoint()
                if policy.turn_taken(before, time.perf_counter()):
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
        reply: Reply[T] = Reply()
        with self._lock:
            self._queued.append((fn, reply))
            start_job = not self._job_queued
            self._job_queued = True
        if start_job:
            post(self._conn, self._run_batches)
        return await _wait_committed(reply)

    def close_here(self) -> None:
        """Close the inline connection (not the last one: it never checkpoints)."""
        here, self._here = self._here, None
        if here is not None:
            with self._here_in_use:
                here.close()

    def _write_here(self, db: sqlite3.Connection, fn: Write[T], one_statement: bool) -> T:
        """One transaction on the caller's thread, or `_LockTaken` without waiting."""
        if not self._here_in_use.acquire(blocking=False):
            raise _LockTaken  # another event loop's thread is in it
        try:
            if one_statement:
                # Its own transaction: it takes the write lock (or finds it taken, at once:
                # busy_timeout 0) and commits as it completes; if it fails, nothing was written.
                # (As after any COMMIT, an exception raised asynchronously in between, such as
                # KeyboardInterrupt, may find it committed: there is no ROLLBACK to run here.)
                self._file.check()
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
                self._file.check()
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
                self._commit(connection_of(self._conn), batch)
            except BaseException as exc:  # noqa: BLE001 - nothing may leave a caller waiting forever
                for _, reply in batch:
                    if not reply.done():
                        reply.settle(False, exc)
                        reply.wake()
            self.policy.batch_committed(len(batch))
            if self.policy.inline and self._checkpoint_due(len(batch)):
                self._checkpoint()  # already on the thread, and inline writes are queuing

    def _count_writes(self, count: int) -> None:
        """After writes made on the caller's thread: queue a checkpoint when one is due."""
        if self._checkpoint_due(count):
            post(self._conn, self._checkpoint)

    def _checkpoint_due(self, count: int) -> bool:
        """Count writes; true once the policy calls for a checkpoint, and not again before it ran."""
        with self._lock:
            self._writes_since_checkpoint += count
            if not self.policy.checkpoint_due(self._writes_since_checkpoint) or self._checkpoint_queued:
                return False
            self._checkpoint_queued = True
            return True

    def _checkpoint(self) -> None:
        """On the connection's thread: copy the WAL into the database (this one fsyncs; rule 5)."""
        db = connection_of(self._conn)
        try:
            # A checkpoint that fails (busy readers elsewhere, say) only leaves the work to the
            # next one. Nothing it raises may end `_run_batches`, which would leave the queue
            # marked as served and every later write waiting.
            with contextlib.suppress(Exception):
                [(_, frames, _)] = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                if self.policy.restart_due(frames):
                    with self._here_in_use:
                        db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        finally:
            with self._lock:
                self._writes_since_checkpoint = 0
                self._checkpoint_queued = False

    def _commit(self, db: sqlite3.Connection, batch: list[tuple[Write[Any], Reply[Any]]]) -> None:
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
            reply.settle(ok, value)
            waiting.setdefault(reply.schedule, []).append(reply.event)
        for schedule, events in waiting.items():
            with contextlib.suppress(Exception):  # that loop is gone; nobody is left to wake
                schedule(partial(_wake_in_turns, schedule, events))

    def _transaction(self, db: sqlite3.Connection, writes: list[Write[Any]], *,
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
            self._file.check()
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


async def _wait_committed(reply: Reply[T]) -> T:
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
