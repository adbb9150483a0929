"""`SQLiteStore`: the embedded default, on aiosqlite.

Every operation is one function run on aiosqlite's connection thread: a write is
``BEGIN IMMEDIATE`` .. ``COMMIT`` inside that function, so it costs one thread
crossing and cannot be torn by cancellation. ``BEGIN IMMEDIATE`` takes the write
lock up front: a deferred transaction that reads and then writes is what makes
another process's claim fail with "database is locked" instead of waiting.
Where each write runs (on the thread, or inline on the caller's) is
`WritePolicy`'s decision.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.to_thread

from .. import _json
from .._bridge import other_loop_error
from .._claims import failed_claim, sole_pending
from .._driver import DriverStore
from .._errors import (
    ConfigurationError,
    DuplicateInterrupt,
    ExecutionFinished,
    ExecutionNotFound,
    LeaseHeld,
    NotFailed,
    StaleLease,
    StoreCorrupted,
    StoreError,
    StoreUnavailable,
)
from .._json import entry_rows
from .._limits import Window, blocked, spent, take
from .._models import (
    FINAL_STATUSES,
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
from .._protocol import (
    FEW_UNDER_PREFIX,
    ancestors,
    check_limit,
    prefix_range,
    prunable,
    token_digest_taken,
    token_named,
    version_pairs,
)
from .._queues import Candidate, Counts, admit, fetch_size, room, stats
from .._watch import committed
from . import _aiosqlite
from .check import find_problems
from .errors import DAMAGE_HINT, map_errors, missing_store, refused
from .opening import OpenedFile, configure, existing_only, open_inline
from .rows import (
    EXEC_COLS,
    FINAL_SQL,
    PENDING_COLS,
    TOKEN_COLS,
    execution_from,
    from_us,
    from_us_or_none,
    now_us,
    pending_from,
    span_us,
    to_us,
    to_us_or_none,
    token_from,
)
from .writes import GroupCommit, Synchronous, WritePolicy

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
    from datetime import datetime

    import aiosqlite
    from pydantic import JsonValue

    from .._bridge import DriverLoop
    from .._watch import Check


T = TypeVar("T")

# One journal entry in one statement, fenced by its lease: the execution id is read
# from the execution's row only while the lease is held, and NULL, which NOT NULL
# refuses, otherwise. _APPEND_AT is given the number the store expects, and refused
# the same way unless the journal ends just before it; _APPEND_NEXT reads the
# number from the journal and returns it (RETURNING costs about a sixth of the statement).
# Both are INSERT .. VALUES: an INSERT .. SELECT that reads its own table first
# copies its rows into a temporary table.
_APPEND_INTO = (
    "INSERT INTO tether_journal (execution_id, seq, path, label, kind, payload, created_at) VALUES ("
    "(SELECT id FROM tether_executions WHERE id = ?1 AND lease_epoch = ?2 AND lease_owner = ?3), "
)
_APPEND_AT = _APPEND_INTO + (
    "(SELECT ?9 WHERE (SELECT coalesce(max(seq), 0) FROM tether_journal WHERE execution_id = ?1) = ?9 - 1), "
    "?4, ?5, ?6, ?7, ?8)"
)
_APPEND_NEXT = _APPEND_INTO + (
    "(SELECT coalesce(max(seq), 0) + 1 FROM tether_journal WHERE execution_id = ?1), "
    "?4, ?5, ?6, ?7, ?8) RETURNING seq"
)
_SEQ_HINTS_KEPT = 4096  # executions whose next number a store remembers; then it starts over


class SQLiteStore(DriverStore):
    """A store in one SQLite file, shared safely by several processes.

    Args:
        path: The database file; created with its tables if missing.
        create: ``False`` opens only an existing tether store of this version, and
            changes nothing at open (for the operator's read commands): no file, table or
            migration is made, and the file is not switched to WAL. Otherwise
            `StoreNotFound` (no file, or no tether tables) or `SchemaVersionError`.
        synchronous: ``"FULL"`` (default) survives power loss. ``"NORMAL"`` survives a
            process crash but may lose the last commits on power loss, and is much
            cheaper per commit: cheap enough that an uncontended write commits on the
            event loop's thread rather than pay two thread wake-ups (WAL checkpoints,
            which fsync, still run on the connection's thread).
        busy_timeout: Seconds a write waits for another process's write lock before
            failing with `StoreUnavailable`.

    Example:
        ```python
        async with SQLiteStore("app.db") as store:
            print(await store.list_pending())
        ```
    """

    def __init__(
        self,
        path: str | Path,
        *,
        create: bool = True,
        synchronous: Synchronous = "FULL",
        busy_timeout: float = 30.0,
    ) -> None:
        super().__init__()
        if synchronous not in ("FULL", "NORMAL"):
            raise ConfigurationError(
                f"synchronous={synchronous!r} is not supported; use 'FULL' or 'NORMAL'."
            )
        self.path: str = str(path)
        self.create = create
        self.synchronous: Synchronous = synchronous
        self.busy_timeout = busy_timeout
        # The first damage an operation found; from then on every operation is refused with
        # it, so that nothing more is written to a damaged file (one attribute test per call).
        self._damage: StoreCorrupted | None = None
        self._conn: aiosqlite.Connection | None = None
        self._group: GroupCommit | None = None
        # Execution id -> the number its next entry should get, as this store last wrote it.
        # Only a hint: the statement that uses it checks it (another process may append).
        self._next_seqs: dict[str, int] = {}
        self._version_asked: tuple[float, int] | None = None  # when data_version was last asked, and its answer

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    @property
    def identity(self) -> object:
        return ("sqlite", os.path.realpath(self.path))

    watch_interval: float = 0.02
    """Seconds between the checks (``PRAGMA data_version``) by which a watch sees other processes' writes."""

    # -- plumbing ------------------------------------------------------------

    async def _open(self) -> None:
        target = self.path
        if not self.create:
            # sqlite3 creates a missing file on connect, so look first (on a thread: the hint
            # lists the directory), then connect with a URI that never creates one.
            missing = await asyncio.get_running_loop().run_in_executor(None, missing_store, self.path)
            if missing is not None:
                raise missing
            target = existing_only(self.path)
        with map_errors(self.path):
            conn = await _aiosqlite.connect(
                target, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False,
                uri=not self.create,
            )
        self._conn = conn
        policy = WritePolicy(self.synchronous)

        def ready(db: sqlite3.Connection) -> OpenedFile:
            configure(db, self, policy)
            return OpenedFile(self.path)  # the file exists by now, created or not

        try:
            file = await self._call(ready)
            here = None
            if policy.inline:
                here = await self._call(lambda _: open_inline(self))
        except BaseException:
            await conn.close()
            self._conn = None
            raise
        self._group = GroupCommit(conn, now_us, policy, file, here=here)

    async def _close(self) -> None:
        self._drop_group()
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    async def _abandon(self) -> None:
        self._drop_group()
        conn, self._conn = self._conn, None
        if conn is not None:
            stopped = conn.stop()  # closes the connection on its own thread
            if stopped is not None:
                await stopped

    def _drop_group(self) -> None:
        group, self._group = self._group, None
        if group is not None:
            group.close_here()

    @contextlib.asynccontextmanager
    async def _change_source(self, execution_id: str) -> AsyncIterator[tuple[Check | None, float]]:
        # data_version moves whenever another connection (another process, another store
        # object) commits to the file; this object's own writes poke its watches directly.
        seen = await self._data_version()

        async def check() -> bool:
            nonlocal seen
            now = await self._data_version()
            changed, seen = now != seen, now
            return changed

        yield check, self.watch_interval

    control_interval: float = 0.25
    """Seconds between a running execution's checks for a cancel asked by another process."""

    @contextlib.asynccontextmanager
    async def _control_source(self, execution_id: str) -> AsyncIterator[tuple[Check | None, float]]:
        # Nothing to ask while no other connection committed (one process alone never asks
        # more than data_version); after one did, whether it recorded a cancel for this run.
        seen = await self._data_version(self.control_interval)

        async def check() -> bool:
            nonlocal seen
            now = await self._data_version(self.control_interval)
            if now == seen:
                return False
            seen = now
            return await self._read(lambda db: _cancel_asked(db, execution_id))

        yield check, self.control_interval

    async def _data_version(self, interval: float | None = None) -> int:
        # Asked once per interval for all of this object's watches, not once by each of them:
        # the question queues on the connection that every write uses.
        now = anyio.current_time()
        asked = self._version_asked
        if asked is not None and now - asked[0] < (interval or self.watch_interval) / 2:
            return asked[1]
        version = await self._read(_data_version)
        self._version_asked = (now, version)
        return version

    async def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the connection's thread, from the driver loop (while opening)."""
        conn = self._conn
        if conn is None:  # pragma: no cover - guarded by DriverStore
            raise StoreUnavailable(f"{self!r} is not open")
        # Opening does not mark the store damaged: its checks come before any write, and a
        # failed open runs them all again at the next operation.
        with map_errors(self.path):
            return await _aiosqlite.call_on_driver_loop(conn, fn)

    def _writer(self, loop: DriverLoop) -> GroupCommit:
        """The connection's reader and writer, checked to belong to the caller's event loop."""
        if not loop.reachable():
            raise other_loop_error()
        if self._group is None:  # pragma: no cover - guarded by DriverStore
            raise StoreUnavailable(f"{self!r} is not open")
        return self._group

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the connection's thread straight from the caller's loop."""
        if self._damage is not None:
            raise refused(self.path, self._damage)
        group = self._writer(self._driver_loop or await self._loop())
        with map_errors(self.path, self):
            return await self._counted(group.read(fn))

    async def _write(self, fn: Callable[[sqlite3.Connection, int], T], *, one_statement: bool = False) -> T:
        """Run ``fn(db, now)`` inside ``BEGIN IMMEDIATE`` .. ``COMMIT``, shared with concurrent writes.

        Once queued, the function runs to COMMIT or ROLLBACK on its thread; a
        cancelled caller waits for that outcome rather than guess it. With
        ``one_statement`` (see `GroupCommit.write`), ``fn`` must write with one
        statement and step it to its end (``fetchall``, not ``fetchone``). A store that
        found damage writes nothing more.
        """
        if self._damage is not None:
            raise refused(self.path, self._damage)
        group = self._writer(self._driver_loop or await self._loop())
        self._in_flight += 1  # what `_counted` does, without its coroutine: this is every boundary
        try:
            with map_errors(self.path, self):
                return await group.write(fn, one_statement=one_statement)
        finally:
            self._finished_one()

    @staticmethod
    def _fence(db: sqlite3.Connection, lease: Lease, changes: str = "", params: Sequence[Any] = ()) -> None:
        """Refuse a write whose lease was taken over; ``changes`` updates the execution's row too."""
        held = "WHERE id = ? AND lease_epoch = ? AND lease_owner = ?"
        fence = (lease.execution_id, lease.epoch, lease.owner)
        if changes:
            row = db.execute(f"UPDATE tether_executions SET {changes} {held} RETURNING 1", (*params, *fence))
        else:
            row = db.execute(f"SELECT 1 FROM tether_executions {held}", fence)
        if row.fetchone() is None:
            raise SQLiteStore._fence_error(db, lease)

    @staticmethod
    def _fence_error(db: sqlite3.Connection, lease: Lease) -> StoreError:
        """Why a fenced write found no row: the execution is gone, or its lease is someone else's."""
        if db.execute("SELECT 1 FROM tether_executions WHERE id = ?", (lease.execution_id,)).fetchone() is None:
            return ExecutionNotFound(lease.execution_id)
        return StaleLease(lease.execution_id, lease.epoch)

    @staticmethod
    def _next_seq(db: sqlite3.Connection, execution_id: str) -> int:
        """The next sequence number of an execution's journal, from the journal itself.

        Every write transaction holds the file's write lock (``BEGIN IMMEDIATE``), so no
        other writer can take the same number; the primary key answers in one lookup.
        """
        row = db.execute(
            "SELECT coalesce(max(seq), 0) + 1 FROM tether_journal WHERE execution_id = ?", (execution_id,)
        ).fetchone()
        return int(row[0])

    def _insert_entries(
        self, db: sqlite3.Connection, execution_id: str, rows: list[tuple[str, str, str, str]], now: int
    ) -> list[int]:
        """Append ``rows`` after the journal's last entry; their sequence numbers."""
        if not rows:
            return []
        first = self._next_seq(db, execution_id)
        seqs = list(range(first, first + len(rows)))
        db.executemany(
            "INSERT INTO tether_journal (execution_id, seq, path, label, kind, payload, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(execution_id, seq, *row, now) for seq, row in zip(seqs, rows, strict=True)],
        )
        self._remember_next(execution_id, seqs[-1] + 1)
        return seqs

    # -- executions ----------------------------------------------------------

    async def start_execution(
        self, new: NewExecution, *, owner: str, lease_seconds: float
    ) -> StartResult:
        input_json = _json.dumps(new.input, what="the execution's input")
        deadline = None if new.deadline is None else to_us(new.deadline)

        def fn(db: sqlite3.Connection, now: int) -> StartResult:
            row = db.execute(
                f"INSERT INTO tether_executions ({EXEC_COLS}) "
                "VALUES (?, ?, ?, ?, 'running', ?, NULL, NULL, ?, ?, 1, ?, ?, NULL, ?, ?, NULL, ?, ?, NULL, NULL, 0) "
                f"ON CONFLICT (id) DO NOTHING RETURNING {EXEC_COLS}",
                (new.execution_id, new.runner, new.root_path, new.fingerprint, input_json,
                 owner, now + span_us(lease_seconds), now, now, new.version, deadline, new.thread, new.trace),
            ).fetchone()
            if row is not None:
                execution = execution_from(row)
                lease = Lease(execution_id=new.execution_id, owner=owner, epoch=1,
                              expires_at=from_us(now + span_us(lease_seconds)), deadline=new.deadline)
                return StartResult(execution=execution, created=True, lease=lease)
            row = db.execute(
                f"SELECT {EXEC_COLS} FROM tether_executions WHERE id = ?", (new.execution_id,)
            ).fetchone()
            return StartResult(execution=execution_from(row), created=False)

        return await self._write(fn)

    async def enqueue_execution(self, new: NewExecution) -> StartResult:
        input_json = _json.dumps(new.input, what="the execution's input")
        deadline = None if new.deadline is None else to_us(new.deadline)

        def fn(db: sqlite3.Connection, now: int) -> StartResult:
            row = db.execute(
                f"INSERT INTO tether_executions ({EXEC_COLS}) "
                "VALUES (?, ?, ?, ?, 'queued', ?, NULL, NULL, NULL, NULL, 0, ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?, ?) "
                f"ON CONFLICT (id) DO NOTHING RETURNING {EXEC_COLS}",
                (new.execution_id, new.runner, new.root_path, new.fingerprint, input_json, now, now, now,
                 new.version, deadline, new.thread, new.trace, new.queue, new.queue_key, new.priority),
            ).fetchone()
            if row is not None:
                return StartResult(execution=execution_from(row), created=True)
            row = db.execute(
                f"SELECT {EXEC_COLS} FROM tether_executions WHERE id = ?", (new.execution_id,)
            ).fetchone()
            return StartResult(execution=execution_from(row), created=False)

        return await self._write(fn)

    async def take_work(
        self, *, owner: str, lease_seconds: float, limit: int, roots: Sequence[str] | None = None,
        versions: Mapping[str, Sequence[str]] | None = None,
    ) -> list[Lease]:
        check_limit(limit)
        root_list = None if roots is None else _json.dumps(list(roots))
        pairs = None if versions is None else _json.dumps(version_pairs(versions))

        def fn(db: sqlite3.Connection, now: int) -> list[Lease]:
            # BEGIN IMMEDIATE already excludes every other writer, so no row-level locking is needed.
            expires = now + span_us(lease_seconds)
            rows = db.execute(
                "UPDATE tether_executions SET lease_owner = :owner, lease_expires_at = :expires, "
                "lease_epoch = lease_epoch + 1, status = 'running', wake_at = NULL, updated_at = :now "
                f"WHERE id IN (SELECT id FROM ({_READY_SQL}) ORDER BY at LIMIT :limit) "
                "RETURNING id, lease_epoch, deadline, cancel",
                {"owner": owner, "expires": expires, "now": now, "roots": root_list, "pairs": pairs, "limit": limit},
            ).fetchall()
            return [_lease(r[0], owner, r[1], expires, r[2], r[3]) for r in rows]

        return await self._write(fn)

    async def declare_queue(self, limits: QueueLimits) -> None:
        def fn(db: sqlite3.Connection, now: int) -> None:
            db.execute(
                "INSERT INTO tether_queues (name, concurrency, per_key, rate_limit, rate_seconds, priority, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET concurrency = excluded.concurrency, "
                "per_key = excluded.per_key, rate_limit = excluded.rate_limit, rate_seconds = excluded.rate_seconds, "
                "priority = excluded.priority, updated_at = excluded.updated_at",
                (limits.name, limits.concurrency, limits.per_key, limits.rate_limit, limits.rate_seconds,
                 int(limits.priority), now),
            )

        await self._write(fn)

    async def take_queued(
        self, queue: str, *, owner: str, lease_seconds: float, limit: int, roots: Sequence[str] | None = None,
        versions: Mapping[str, Sequence[str]] | None = None,
    ) -> list[Lease]:
        check_limit(limit)
        root_list = None if roots is None else _json.dumps(list(roots))
        pairs = None if versions is None else _json.dumps(version_pairs(versions))

        def fn(db: sqlite3.Connection, now: int) -> list[Lease]:
            # BEGIN IMMEDIATE holds every other writer off: the counts stay true until COMMIT.
            limits = _queue_limits(db, queue)
            if limits is None:
                return []
            running: dict[str | None, int] = dict(db.execute(
                "SELECT queue_key, count(*) FROM tether_executions "
                "WHERE queue = ? AND status = 'running' AND lease_expires_at > ? GROUP BY queue_key", (queue, now),
            ).fetchall())
            free = room(limits, running, limit)
            if free == 0:
                return []
            admitted = db.execute(
                "SELECT count(*) FROM tether_executions WHERE queue = ? AND admitted_at > ?",
                (queue, now - span_us(limits.rate_seconds or 60.0)),
            ).fetchone()[0] if limits.rate_limit is not None else 0
            rows = db.execute(
                "SELECT id, queue_key, status FROM (SELECT id, queue_key, status, priority, created_at, "
                "  row_number() OVER (PARTITION BY queue_key ORDER BY priority, created_at, id) AS turn "
                "  FROM tether_executions WHERE queue = ? AND ((status IN ('queued', 'paused', 'decided') "
                "    AND wake_at <= ?) OR (status = 'running' AND coalesce(lease_expires_at, 0) <= ?)) "
                "    AND (? IS NULL OR root_path IN (SELECT value FROM json_each(?))) "
                "    AND (? IS NULL OR version = '' "
                "         OR root_path || char(31) || version IN (SELECT value FROM json_each(?)))) "
                "WHERE ? IS NULL OR queue_key IS NULL OR turn <= ? "
                "ORDER BY priority, created_at, id LIMIT ?",
                (queue, now, now, root_list, root_list, pairs, pairs, limits.per_key, limits.per_key,
                 fetch_size(free, running)),
            ).fetchall()
            taken = admit(limits, [Candidate(r[0], r[1], r[2] == "queued") for r in rows], running, admitted, free)
            expires = now + span_us(lease_seconds)
            leases = []
            for execution_id in taken:
                row = db.execute(
                    "UPDATE tether_executions SET lease_owner = ?, lease_expires_at = ?, "
                    "lease_epoch = lease_epoch + 1, status = 'running', wake_at = NULL, updated_at = ?, "
                    "admitted_at = coalesce(admitted_at, ?) WHERE id = ? RETURNING id, lease_epoch, deadline, cancel",
                    (owner, expires, now, now, execution_id),
                ).fetchone()
                leases.append(_lease(row[0], owner, row[1], expires, row[2], row[3]))
            return leases

        return await self._write(fn)

    async def declare_schedule(self, schedule: ScheduleRow) -> ScheduleRow:
        definition = _json.dumps(schedule.definition(), what="the schedule's input")

        def fn(db: sqlite3.Connection, now: int) -> ScheduleRow:
            db.execute(
                "INSERT INTO tether_schedules (name, definition, paused, last_tick, updated_at) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET definition = excluded.definition, updated_at = excluded.updated_at",
                (schedule.name, definition, int(schedule.paused), to_us(schedule.last_tick), now),
            )
            return _schedule(db.execute(f"SELECT {_SCHEDULE_COLS} FROM tether_schedules WHERE name = ?",
                                        (schedule.name,)).fetchone())

        return await self._write(fn)

    async def list_schedules(self) -> list[ScheduleRow]:
        def fn(db: sqlite3.Connection) -> list[ScheduleRow]:
            return [_schedule(row) for row in db.execute(f"SELECT {_SCHEDULE_COLS} FROM tether_schedules ORDER BY name")]

        return await self._read(fn)

    async def advance_schedule(self, name: str, *, seen: datetime, to: datetime) -> bool:
        def fn(db: sqlite3.Connection, now: int) -> bool:
            return db.execute("UPDATE tether_schedules SET last_tick = ?, updated_at = ? WHERE name = ? AND last_tick = ?",
                              (to_us(to), now, name, to_us(seen))).rowcount == 1

        return await self._write(fn)

    async def pause_schedule(self, name: str, *, paused: bool, now: datetime) -> ScheduleRow | None:
        def fn(db: sqlite3.Connection, at: int) -> ScheduleRow | None:
            row = db.execute(
                "UPDATE tether_schedules SET paused = ?, updated_at = ?, "
                "last_tick = CASE WHEN ? THEN last_tick ELSE max(last_tick, ?) END "
                f"WHERE name = ? RETURNING {_SCHEDULE_COLS}",
                (int(paused), at, int(paused), to_us(now), name),
            ).fetchone()
            return None if row is None else _schedule(row)

        return await self._write(fn)

    async def take_llm_quota(self, name: str, *, requests: int | None, tokens: int | None,
                             per_seconds: float) -> float:
        def fn(db: sqlite3.Connection, now: int) -> float:
            wait, window = take(_window(db, name), now / 1e6, per_seconds, requests, tokens)
            _store_window(db, name, window)
            return wait

        return await self._write(fn)

    async def add_llm_tokens(self, name: str, tokens: int, *, per_seconds: float) -> None:
        def fn(db: sqlite3.Connection, now: int) -> None:
            _store_window(db, name, spent(_window(db, name), now / 1e6, per_seconds, tokens))

        await self._write(fn)

    async def block_llm(self, name: str, seconds: float) -> None:
        def fn(db: sqlite3.Connection, now: int) -> None:
            _store_window(db, name, blocked(_window(db, name), now / 1e6, seconds))

        await self._write(fn)

    async def queue_stats(self) -> list[QueueStats]:
        def fn(db: sqlite3.Connection) -> list[QueueStats]:
            now = now_us()
            rows: list[QueueStats] = []
            for name, rate_seconds in db.execute("SELECT name, rate_seconds FROM tether_queues ORDER BY name"):
                keys: dict[str | None, Counts] = {}
                for key, waiting, running, admitted, oldest in db.execute(
                    "SELECT queue_key, "
                    "  sum(CASE WHEN (status IN ('queued', 'paused', 'decided') AND wake_at <= ?) "
                    "    OR (status = 'running' AND coalesce(lease_expires_at, 0) <= ?) THEN 1 ELSE 0 END), "
                    "  sum(CASE WHEN status = 'running' AND lease_expires_at > ? THEN 1 ELSE 0 END), "
                    "  sum(CASE WHEN admitted_at > ? THEN 1 ELSE 0 END), "
                    "  min(CASE WHEN (status IN ('queued', 'paused', 'decided') AND wake_at <= ?) "
                    "    OR (status = 'running' AND coalesce(lease_expires_at, 0) <= ?) THEN created_at END) "
                    "FROM tether_executions WHERE queue = ? GROUP BY queue_key",
                    (now, now, now, now - span_us(rate_seconds or 60.0), now, now, name),
                ):
                    keys[key] = Counts(waiting, running, admitted, from_us_or_none(oldest))
                rows.extend(stats(name, keys))
            return rows

        return await self._read(fn)

    async def request_cancel(self, execution_id: str, *, by: str, reason: str) -> Execution | None:
        request = _json.dumps({"by": by, "reason": reason}, what="the cancel request")

        def fn(db: sqlite3.Connection, now: int) -> Execution | None:
            row = db.execute(
                "UPDATE tether_executions SET "
                "cancel = coalesce(cancel, json_set(?, '$.at', ?)), updated_at = ?, "
                "wake_at = CASE WHEN status = 'running' THEN wake_at ELSE ? END "
                f"WHERE id = ? AND status NOT IN {FINAL_SQL} RETURNING {EXEC_COLS}",
                (request, from_us(now).isoformat(), now, now, execution_id),
            ).fetchone()
            return execution_from(row) if row is not None else _execution(db, execution_id)

        execution = await self._write(fn)
        self._control_requested(execution_id)
        return execution

    async def get_execution(self, execution_id: str) -> Execution | None:
        return await self._read(lambda db: _execution(db, execution_id))

    async def load_execution(self, execution_id: str) -> tuple[Execution, list[JournalEntry]] | None:
        def fn(db: sqlite3.Connection) -> tuple[Execution, list[JournalEntry]] | None:
            # One read transaction: the journal is the one of the row read, whatever commits meanwhile.
            own = not db.in_transaction
            if own:
                db.execute("BEGIN")
            try:
                execution = _execution(db, execution_id)
                return None if execution is None else (execution, _journal(db, execution_id, 0, None))
            finally:
                if own:
                    db.execute("COMMIT")

        return await self._read(fn)

    async def list_executions(
        self,
        *,
        status: ExecutionStatus | None = None,
        limit: int = 100,
        after: Execution | None = None,
        recent: bool = False,
        thread: str | None = None,
    ) -> list[Execution]:
        check_limit(limit)
        where: list[str] = []
        params: list[Any] = []
        if status is not None:
            where.append("status = ?")
            params.append(status)
        if thread is not None:
            where.append("thread = ?")
            params.append(thread)
        if after is not None and recent:
            where.append("(updated_at, id) < (?, ?)")
            params += [to_us(after.updated_at), after.execution_id]
        elif after is not None:
            where.append("(created_at, id) > (?, ?)")
            params += [to_us(after.created_at), after.execution_id]
        sql = f"SELECT {EXEC_COLS} FROM tether_executions"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY updated_at DESC, id DESC LIMIT ?" if recent else " ORDER BY created_at, id LIMIT ?"
        params.append(limit)
        return await self._read(lambda db: [execution_from(r) for r in db.execute(sql, params)])

    async def search_executions(
        self, search: ExecutionSearch | None = None, *, limit: int = 50, before: Execution | None = None
    ) -> list[Execution]:
        check_limit(limit)
        sql, params = search_sql(search or ExecutionSearch(), limit, before)
        return await self._read(lambda db: [execution_from(r) for r in db.execute(sql, params)])

    async def create_token(self, token: TokenRow) -> None:
        row = (token.name, token.digest, _json.dumps(token.scopes, what="the token's scopes"),
               _json.dumps(token.paths, what="the token's paths"), to_us(token.created_at),
               to_us_or_none(token.revoked_at))

        def fn(db: sqlite3.Connection, now: int) -> None:
            # DO NOTHING, not a caught IntegrityError (which the store takes for damage); the
            # write lock held since BEGIN IMMEDIATE makes the look that follows exact.
            made = db.execute(f"INSERT INTO tether_tokens ({TOKEN_COLS}) VALUES (?, ?, ?, ?, ?, ?) "
                              "ON CONFLICT DO NOTHING RETURNING 1", row).fetchall()
            if made:
                return
            if token.revoked_at is None and db.execute(
                    "SELECT 1 FROM tether_tokens WHERE name = ? AND revoked_at IS NULL", (token.name,)).fetchone():
                raise token_named(token.name)
            raise token_digest_taken()

        await self._write(fn)

    async def find_token(self, digest: str) -> TokenRow | None:
        def fn(db: sqlite3.Connection) -> TokenRow | None:
            row = db.execute(f"SELECT {TOKEN_COLS} FROM tether_tokens WHERE digest = ? AND revoked_at IS NULL",
                             (digest,)).fetchone()
            return None if row is None else token_from(row)

        return await self._read(fn)

    async def list_tokens(self) -> list[TokenRow]:
        def fn(db: sqlite3.Connection) -> list[TokenRow]:
            return [token_from(r) for r in db.execute(
                f"SELECT {TOKEN_COLS} FROM tether_tokens ORDER BY name, created_at, digest")]

        return await self._read(fn)

    async def revoke_token(self, name: str, *, at: datetime) -> bool:
        revoked = to_us(at)

        def fn(db: sqlite3.Connection, now: int) -> bool:
            return db.execute("UPDATE tether_tokens SET revoked_at = ? WHERE name = ? AND revoked_at IS NULL",
                              (revoked, name)).rowcount > 0

        return await self._write(fn)

    async def list_threads(self, *, limit: int = 100, after: str | None = None) -> list[ThreadSummary]:
        check_limit(limit)

        def fn(db: sqlite3.Connection) -> list[ThreadSummary]:
            rows = db.execute(
                "SELECT thread, count(*), max(created_at) FROM tether_executions "
                "WHERE thread IS NOT NULL AND (? IS NULL OR thread > ?) GROUP BY thread ORDER BY thread LIMIT ?",
                (after, after, limit),
            ).fetchall()
            found = []
            for thread, runs, _ in rows:
                latest = db.execute(
                    f"SELECT {EXEC_COLS} FROM tether_executions WHERE thread = ? ORDER BY created_at DESC, id DESC "
                    "LIMIT 1", (thread,),
                ).fetchone()
                found.append(ThreadSummary(thread=thread, runs=runs, latest=execution_from(latest)))
            return found

        return await self._read(fn)

    async def reopen(self, execution_id: str, *, by: str) -> Execution:
        payload = _json.dumps({"by": by}, what="who retries")

        def fn(db: sqlite3.Connection, now: int) -> tuple[Execution, int]:
            row = db.execute(
                "UPDATE tether_executions SET status = 'running', error = NULL, lease_owner = NULL, "
                "lease_expires_at = NULL, wake_at = NULL, updated_at = ? "
                f"WHERE id = ? AND status = 'failed' RETURNING {EXEC_COLS}",
                (now, execution_id),
            ).fetchone()
            if row is None:
                raise _refused(db, execution_id, NotFailed)
            execution = execution_from(row)
            [seq] = self._insert_entries(db, execution_id, [(execution.root_path, "retried", "entry", payload)], now)
            return execution, seq

        execution, seq = await self._write(fn)
        self._journal_grew(execution_id, seq)
        return execution

    # -- leases ----------------------------------------------------------------

    async def acquire_lease(
        self, execution_id: str, *, owner: str, lease_seconds: float, replacing: str | None = None
    ) -> Lease:
        def fn(db: sqlite3.Connection, now: int) -> Lease:
            row = db.execute(
                "UPDATE tether_executions SET lease_owner = ?, lease_expires_at = ?, "
                "lease_epoch = lease_epoch + 1, status = 'running', updated_at = ? "
                f"WHERE id = ? AND status NOT IN {FINAL_SQL} "
                "AND (lease_owner IS NULL OR lease_expires_at <= ? OR lease_owner = ? OR lease_owner = ?) "
                "RETURNING lease_epoch, lease_expires_at, deadline, cancel",
                (owner, now + span_us(lease_seconds), now, execution_id, now, owner, replacing),
            ).fetchone()
            if row is not None:
                return _lease(execution_id, owner, *row)
            found = db.execute(
                "SELECT status, lease_owner, lease_expires_at FROM tether_executions WHERE id = ?",
                (execution_id,),
            ).fetchone()
            if found is None:
                raise ExecutionNotFound(execution_id)
            if found[0] in FINAL_STATUSES:
                raise ExecutionFinished(execution_id, found[0])
            raise LeaseHeld(execution_id, found[1], from_us(found[2]))

        return await self._write(fn)

    async def renew_lease(self, lease: Lease, *, lease_seconds: float) -> Lease:
        def fn(db: sqlite3.Connection, now: int) -> Lease:
            row = db.execute(
                "UPDATE tether_executions SET lease_expires_at = ? "
                "WHERE id = ? AND lease_epoch = ? AND lease_owner = ? RETURNING lease_expires_at, cancel",
                (now + span_us(lease_seconds), lease.execution_id, lease.epoch, lease.owner),
            ).fetchone()
            if row is None:
                raise self._fence_error(db, lease)
            return lease.model_copy(update={"expires_at": from_us(row[0]),
                                            "cancel": None if row[1] is None else _json.loads(row[1])})

        return await self._write(fn)

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
        rows = entry_rows(entries)
        final = status in FINAL_STATUSES
        result_json = _json.dumps(result, what="the execution's result") if final else None
        wake = None if final or wake_at is None else to_us(wake_at)

        def fn(db: sqlite3.Connection, now: int) -> tuple[list[int], int]:
            self._fence(
                db, lease,
                "lease_owner = NULL, lease_expires_at = NULL, status = coalesce(?, status), "
                "result = CASE WHEN ? THEN ? ELSE result END, "
                "error = CASE WHEN ? THEN ? ELSE error END, updated_at = ?, wake_at = ?, "
                "cancel = CASE WHEN ? THEN NULL ELSE cancel END",
                (status, final, result_json, final, error, now, wake, final),
            )
            if final:
                db.execute("DELETE FROM tether_pending WHERE execution_id = ?", (lease.execution_id,))
            return self._insert_entries(db, lease.execution_id, rows, now), now

        seqs, at = await self._write(fn)
        if seqs and self._watchers:  # what a follower here is handed, made only for one
            self._journal_grew(lease.execution_id, seqs[-1], committed(lease.execution_id, seqs, rows, from_us(at)))
        return seqs

    # -- journal -------------------------------------------------------------

    async def append(self, lease: Lease, entries: Sequence[NewEntry]) -> list[int]:
        rows = entry_rows(entries)
        if len(rows) == 1:
            row = rows[0]
            seqs, at = await self._write(lambda db, now: ([self._append_one(db, lease, row, now)], now),
                                         one_statement=True)
        elif not rows:
            return []
        else:
            def fn(db: sqlite3.Connection, now: int) -> tuple[list[int], int]:
                self._fence(db, lease)
                return self._insert_entries(db, lease.execution_id, rows, now), now

            seqs, at = await self._write(fn)
        if self._watchers:  # what a follower here is handed, made only for one
            self._journal_grew(lease.execution_id, seqs[-1], committed(lease.execution_id, seqs, rows, from_us(at)))
        return seqs

    def _append_one(self, db: sqlite3.Connection, lease: Lease, row: tuple[str, str, str, str], now: int) -> int:
        """A boundary's one entry: fence, number and insert in one statement.

        Outside a transaction that statement is its own commit. One that is
        refused writes nothing, and the reason is read after it.
        """
        execution_id = lease.execution_id
        values = (execution_id, lease.epoch, lease.owner, *row, now)
        hints = self._next_seqs
        seq = hints.get(execution_id)
        if seq is not None:
            try:
                db.execute(_APPEND_AT, (*values, seq))
            except sqlite3.IntegrityError:
                pass  # another process appended, or the lease is gone: the statement below tells
            else:
                hints[execution_id] = seq + 1
                return seq
        try:
            [(seq,)] = db.execute(_APPEND_NEXT, values).fetchall()  # to its end: its commit
        except sqlite3.IntegrityError:
            self._fence(db, lease)  # StaleLease or ExecutionNotFound, when that was why
            raise  # refused for another reason: as SQLite says it
        self._remember_next(execution_id, seq + 1)
        return int(seq)

    def _remember_next(self, execution_id: str, seq: int) -> None:
        """Keep the number an execution's next entry should get: a hint, checked where it is used."""
        hints = self._next_seqs
        if execution_id not in hints and len(hints) >= _SEQ_HINTS_KEPT:
            hints.clear()  # bounded: executions this store no longer writes to are forgotten
        hints[execution_id] = seq

    async def rewrite(self, lease: Lease, journal: Sequence[JournalEntry], *,
                      pending: Sequence[PendingInterrupt], version: str, fingerprint: str) -> None:
        entries = [(lease.execution_id, e.seq, e.path, e.label, e.kind, _json.dumps(e.payload, what="a journal entry"),
                    to_us(e.created_at)) for e in journal]
        rows = [(lease.execution_id, p.agent_path, p.reason, _json.dumps(p.context, what="the interrupt's context"),
                 p.seq, to_us(p.created_at), None if p.deadline is None else to_us(p.deadline),
                 _json.dumps(p.default, what="the interrupt's default")) for p in pending]

        def fn(db: sqlite3.Connection, now: int) -> None:
            self._fence(db, lease, "version = ?, fingerprint = ?, updated_at = ?", (version, fingerprint, now))
            db.execute("DELETE FROM tether_journal WHERE execution_id = ?", (lease.execution_id,))
            db.executemany("INSERT INTO tether_journal (execution_id, seq, path, label, kind, payload, created_at) "
                           "VALUES (?, ?, ?, ?, ?, ?, ?)", entries)
            db.execute("DELETE FROM tether_pending WHERE execution_id = ?", (lease.execution_id,))
            db.executemany(f"INSERT INTO tether_pending ({PENDING_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
            self._next_seqs.pop(lease.execution_id, None)

        await self._write(fn)
        self._journal_grew(lease.execution_id)

    async def read_journal(
        self, execution_id: str, *, after_seq: int = 0, limit: int | None = None
    ) -> list[JournalEntry]:
        check_limit(limit)
        return await self._read(lambda db: _journal(db, execution_id, after_seq, limit))

    async def suspend(
        self, lease: Lease, entries: Sequence[NewEntry], interrupt: NewInterrupt
    ) -> PendingInterrupt:
        rows = entry_rows(entries)
        context_json = _json.dumps(interrupt.context, what="the interrupt's context")
        default_json = _json.dumps(interrupt.default, what="the interrupt's default")
        deadline = None if interrupt.deadline is None else to_us(interrupt.deadline)

        def fn(db: sqlite3.Connection, now: int) -> PendingInterrupt:
            self._fence(db, lease)
            seqs = self._insert_entries(db, lease.execution_id, rows, now)
            seq = seqs[-1] if seqs else self._next_seq(db, lease.execution_id) - 1
            try:
                row = db.execute(
                    f"INSERT INTO tether_pending ({PENDING_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                    f"RETURNING {PENDING_COLS}",
                    (lease.execution_id, interrupt.path, interrupt.reason, context_json, seq, now,
                     deadline, default_json),
                ).fetchone()
            except sqlite3.IntegrityError as exc:
                raise DuplicateInterrupt(lease.execution_id, interrupt.path) from exc
            return pending_from(row)

        pending = await self._write(fn)
        self._journal_grew(lease.execution_id, pending.seq)
        return pending

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
        entry, _ = await self._claim(execution_id, value, path=path, seq=seq, owner=owner, by=by)
        return entry

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
        # One transaction: a claim that succeeds has taken the lease too.
        return await self._claim(execution_id, value, path=path, seq=seq, owner=owner, by=by,
                                 lease_seconds=lease_seconds)

    async def _claim(self, execution_id: str, value: JsonValue, *, path: str | None, seq: int | None,
                     owner: str | None, by: str | None, lease_seconds: float | None = None,
                     ) -> tuple[JournalEntry, Lease | None]:
        """Claim in one transaction; with ``lease_seconds``, ``owner`` also takes the lease in it."""

        def fn(db: sqlite3.Connection, now: int) -> tuple[JournalEntry, Lease | None]:
            target = path if path is not None else sole_pending(execution_id, _pending_paths(db, execution_id))
            row = None
            if target is not None:
                # Nothing is claimed once a cancel is recorded: the run will not continue.
                row = db.execute(
                    "DELETE FROM tether_pending WHERE execution_id = ? AND path = ? "
                    "AND (? IS NULL OR seq = ?) AND NOT EXISTS (SELECT 1 FROM tether_executions "
                    "WHERE id = ? AND cancel IS NOT NULL) RETURNING reason, seq",
                    (execution_id, target, seq, seq, execution_id),
                ).fetchone()
            if row is None or target is None:
                raise _failed_claim(db, execution_id, target)
            held = db.execute(
                "SELECT lease_owner, lease_expires_at FROM tether_executions WHERE id = ? "
                "AND lease_owner IS NOT NULL AND lease_expires_at > ? AND lease_owner IS NOT ?",
                (execution_id, now, owner),
            ).fetchone()
            if held is not None:  # raising rolls the DELETE back: nothing is consumed
                raise LeaseHeld(execution_id, held[0], from_us(held[1]))
            payload: dict[str, JsonValue] = {"value": value, "suspended_seq": row[1], "reason": row[0]}
            if by is not None:
                payload["by"] = by
            payload_json = _json.dumps(payload, what="the resume value")
            lease = None
            if lease_seconds is None:
                db.execute(
                    "UPDATE tether_executions SET wake_at = ?, updated_at = ?, "
                    "status = CASE status WHEN 'paused' THEN 'decided' ELSE status END WHERE id = ?",
                    (now, now, execution_id),
                )
            else:  # the lease is free or ``owner``'s: the check above passed in this transaction
                assert owner is not None
                leased = db.execute(
                    "UPDATE tether_executions SET lease_owner = ?, lease_expires_at = ?, "
                    "lease_epoch = lease_epoch + 1, status = 'running', wake_at = NULL, updated_at = ? "
                    "WHERE id = ? RETURNING lease_epoch, lease_expires_at, deadline, cancel",
                    (owner, now + span_us(lease_seconds), now, execution_id),
                ).fetchone()
                lease = _lease(execution_id, owner, *leased)
            resumed = (target, "resumed", "resumed", payload_json)
            [resumed_seq] = self._insert_entries(db, execution_id, [resumed], now)
            return JournalEntry(execution_id=execution_id, seq=resumed_seq, path=target,
                                label="resumed", kind="resumed", payload=payload,
                                created_at=from_us(now)), lease

        # Serialize the value before the transaction: a bad one consumes nothing.
        _json.dumps(value, what="the resume value")
        entry, lease = await self._write(fn)
        self._journal_grew(execution_id, entry.seq)
        return entry, lease

    async def deliver_message(self, execution_id: str, path: str, message: JsonValue, *, by: str) -> JournalEntry:
        payload = {"message": message, "by": by}
        payload_json = _json.dumps(payload, what="the message")

        def fn(db: sqlite3.Connection, now: int) -> JournalEntry:
            found = db.execute(
                f"UPDATE tether_executions SET wake_at = ?, updated_at = ? WHERE id = ? AND status NOT IN {FINAL_SQL} "
                "RETURNING 1", (now, now, execution_id),
            ).fetchone()
            if found is None:
                raise _refused(db, execution_id, ExecutionFinished)
            [seq] = self._insert_entries(db, execution_id, [(path, "message", "entry", payload_json)], now)
            return JournalEntry(execution_id=execution_id, seq=seq, path=path, label="message", kind="entry",
                                payload=_json.loads(payload_json), created_at=from_us(now))

        entry = await self._write(fn)
        self._journal_grew(execution_id, entry.seq)
        return entry

    async def list_pending(
        self,
        *,
        execution_id: str | None = None,
        path_prefix: str | None = None,
        limit: int = 100,
        after: PendingInterrupt | None = None,
        due_before: datetime | None = None,
    ) -> list[PendingInterrupt]:
        check_limit(limit)
        where, params = _pending_filter(execution_id, None)
        if due_before is not None:
            where.append("deadline <= ?")
            params.append(to_us(due_before))
        if after is not None:
            where.append("(created_at, execution_id, path) > (?, ?, ?)")
            params += [to_us(after.created_at), after.execution_id, after.agent_path]

        def fn(db: sqlite3.Connection) -> list[PendingInterrupt]:
            source, conditions, values = "tether_pending", list(where), list(params)
            if path_prefix:
                # An execution's own rows, or those due, are few already: the prefix only filters them.
                if execution_id is None and due_before is None and _few_under(db, path_prefix):
                    source = "tether_pending INDEXED BY tether_pending_by_path"
                    range_sql, range_args = _path_range(path_prefix)
                    conditions.append(range_sql)
                    values += range_args
                else:
                    conditions.append("substr(path, 1, length(?)) = ?")  # no index: the age order is kept
                    values += [path_prefix, path_prefix]
            sql = f"SELECT {PENDING_COLS} FROM {source}"
            if conditions:
                sql += " WHERE " + " AND ".join(conditions)
            sql += " ORDER BY created_at, execution_id, path LIMIT ?"
            return [pending_from(r) for r in db.execute(sql, [*values, limit])]

        return await self._read(fn)

    async def count_pending(
        self, *, execution_id: str | None = None, path_prefix: str | None = None
    ) -> int:
        where, params = _pending_filter(execution_id, path_prefix)
        sql = "SELECT count(*) FROM tether_pending"
        if where:
            sql += " WHERE " + " AND ".join(where)
        return await self._read(lambda db: int(db.execute(sql, params).fetchone()[0]))

    # -- idempotency ---------------------------------------------------------

    async def get_idempotent(self, execution_id: str, key: str) -> IdempotencyRecord | None:
        def fn(db: sqlite3.Connection) -> IdempotencyRecord | None:
            row = db.execute(
                "SELECT value, created_at FROM tether_idempotency WHERE execution_id = ? AND key = ?",
                (execution_id, key),
            ).fetchone()
            if row is None:
                return None
            return IdempotencyRecord(execution_id=execution_id, key=key,
                                     value=_json.loads(row[0]), created_at=from_us(row[1]))

        return await self._read(fn)

    async def list_idempotent(self, execution_id: str) -> list[IdempotencyRecord]:
        def fn(db: sqlite3.Connection) -> list[IdempotencyRecord]:
            rows = db.execute(
                "SELECT key, value, created_at FROM tether_idempotency WHERE execution_id = ? ORDER BY key",
                (execution_id,),
            ).fetchall()
            return [IdempotencyRecord(execution_id=execution_id, key=key, value=_json.loads(value),
                                      created_at=from_us(at)) for key, value, at in rows]

        return await self._read(fn)

    async def put_idempotent(self, lease: Lease, key: str, value: JsonValue) -> IdempotencyRecord:
        value_json = _json.dumps(value, what=f"the result recorded for {key!r}")

        def fn(db: sqlite3.Connection, now: int) -> IdempotencyRecord:
            self._fence(db, lease)
            db.execute(
                "INSERT INTO tether_idempotency (execution_id, key, value, created_at) "
                "VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (lease.execution_id, key, value_json, now),
            )
            row = db.execute(
                "SELECT value, created_at FROM tether_idempotency WHERE execution_id = ? AND key = ?",
                (lease.execution_id, key),
            ).fetchone()
            return IdempotencyRecord(execution_id=lease.execution_id, key=key,
                                     value=_json.loads(row[0]), created_at=from_us(row[1]))

        return await self._write(fn)

    # -- maintenance ---------------------------------------------------------

    async def delete_execution(self, execution_id: str) -> bool:
        def fn(db: sqlite3.Connection, now: int) -> bool:
            for table in ("tether_journal", "tether_pending", "tether_idempotency"):
                db.execute(f"DELETE FROM {table} WHERE execution_id = ?", (execution_id,))
            cursor = db.execute("DELETE FROM tether_executions WHERE id = ?", (execution_id,))
            return cursor.rowcount > 0

        return await self._write(fn)

    async def prune(self, *, older_than: datetime, statuses: Sequence[ExecutionStatus] | None = None,
                    limit: int | None = None) -> int:
        cutoff = to_us(older_than)
        chosen = _json.dumps(prunable(statuses, limit))

        # The oldest first, walking the index of update times (the status index would have every
        # old run sorted first). A thread's runs go together, once its latest is old and finished:
        # each run reads the conversation of the ones before it.
        old = (f"updated_at < :cutoff AND +status IN {FINAL_SQL} AND +status IN (SELECT value FROM json_each(:chosen)) "
               "AND (thread IS NULL OR NOT EXISTS (SELECT 1 FROM tether_executions k WHERE k.thread = e.thread "
               f"AND (k.status NOT IN {FINAL_SQL} OR k.updated_at >= :cutoff)))")

        def fn(db: sqlite3.Connection, now: int) -> int:
            ids = _json.dumps([row[0] for row in db.execute(
                f"SELECT id FROM tether_executions e WHERE {old} ORDER BY updated_at LIMIT :limit",
                {"cutoff": cutoff, "chosen": chosen, "limit": limit or -1})])
            for table in ("tether_journal", "tether_pending", "tether_idempotency"):
                db.execute(f"DELETE FROM {table} WHERE execution_id IN (SELECT value FROM json_each(?))", (ids,))
            return db.execute("DELETE FROM tether_executions WHERE id IN (SELECT value FROM json_each(?))",
                              (ids,)).rowcount

        return await self._write(fn)

    # -- workers -------------------------------------------------------------

    @contextmanager
    def worker_slot(self) -> Iterator[None]:
        """Be the one worker process of this file, or raise at once.

        Takes an exclusive `flock` on ``<path>.worker.lock``, held until the block
        exits (or the process dies: the OS then lets go of it). SQLite supports one
        worker process per file; Postgres shares work among any number.

        Raises:
            ConfigurationError: Another worker holds this file's slot (in this process or another).
        """
        import fcntl  # POSIX only: imported where it is needed, so the package imports anywhere

        path = Path(self.path + ".worker.lock")
        with path.open("a") as handle:  # closing the file releases the lock
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ConfigurationError(
                    f"Another tether worker already works on this SQLite store ({path} is locked). SQLite "
                    f"supports one worker process at a time; use Postgres for several."
                ) from None
            yield

    # -- checks ----------------------------------------------------------------

    async def check(self) -> list[str]:
        """Run SQLite's ``PRAGMA integrity_check`` and tether's own checks; change nothing.

        Reads the whole file, on a worker thread and a read-only connection of its
        own, so this store's operations go on meanwhile. Every text must be UTF-8,
        every stored JSON value must parse and every status be one; no journal
        entry, pending interrupt or idempotency record may lack its execution; a
        pending interrupt's ``seq`` must be a ``suspended`` entry of its journal.
        It runs on a store that already found damage too, and damage it finds makes
        the store refuse every later operation, as any operation's would.

        Returns:
            What is wrong, one line per problem (the first few of each kind, then
            how many more); empty when the store is sound.

        Raises:
            StoreCorrupted: The file cannot be opened as a tether store (as for `setup`).
            StoreUnavailable: The file cannot be read.
        """
        await self._loop()  # opens the store as setup() does, and raises what it raises
        opened: list[sqlite3.Connection] = []
        try:
            with map_errors(self.path):
                problems, damaged = await anyio.to_thread.run_sync(
                    find_problems, self.path, self.busy_timeout, opened, abandon_on_cancel=True
                )
        except anyio.get_cancelled_exc_class():
            for db in opened:
                # The scan stops at its next step, and its thread closes the connection (which may
                # have happened already: then there is nothing to interrupt).
                with contextlib.suppress(sqlite3.ProgrammingError):
                    db.interrupt()
            raise
        if damaged and self._damage is None:
            self._damage = StoreCorrupted(
                f"{self.path!r} is damaged: check() found {len(problems)} problems, the first: "
                f"{problems[0]} {DAMAGE_HINT}"
            )
        return problems


def _window(db: sqlite3.Connection, name: str) -> Window | None:
    row = db.execute("SELECT window_start, requests, tokens, blocked_until FROM tether_llm_limits WHERE name = ?",
                     (name,)).fetchone()
    return None if row is None else Window(*row)


def _store_window(db: sqlite3.Connection, name: str, window: Window) -> None:
    db.execute("INSERT INTO tether_llm_limits (name, window_start, requests, tokens, blocked_until) "
               "VALUES (?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET window_start = excluded.window_start, "
               "requests = excluded.requests, tokens = excluded.tokens, blocked_until = excluded.blocked_until",
               (name, window.start, window.requests, window.tokens, window.blocked_until))


_SCHEDULE_COLS = "name, definition, paused, last_tick"


def _schedule(row: Sequence[Any]) -> ScheduleRow:
    return ScheduleRow(name=row[0], paused=bool(row[2]), last_tick=from_us(row[3]), **_json.loads(row[1]))


def _queue_limits(db: sqlite3.Connection, queue: str) -> QueueLimits | None:
    row = db.execute("SELECT concurrency, per_key, rate_limit, rate_seconds, priority FROM tether_queues "
                     "WHERE name = ?", (queue,)).fetchone()
    if row is None:
        return None
    return QueueLimits(name=queue, concurrency=row[0], per_key=row[1], rate_limit=row[2], rate_seconds=row[3],
                       priority=bool(row[4]))


def _lease(execution_id: str, owner: str, epoch: int, expires: int, deadline: int | None,
           cancel: str | None) -> Lease:
    """A lease as a statement that took it returned it, with what its holder must obey."""
    return Lease(execution_id=execution_id, owner=owner, epoch=epoch, expires_at=from_us(expires),
                 deadline=from_us_or_none(deadline), cancel=None if cancel is None else _json.loads(cancel))


def _refused(db: sqlite3.Connection, execution_id: str, refusal: Callable[[str, str], StoreError]) -> StoreError:
    """Why a statement that changes one execution changed nothing: no such execution, or ``refusal`` of its status."""
    found = _execution(db, execution_id)
    return ExecutionNotFound(execution_id) if found is None else refusal(execution_id, found.status)


def _cancel_asked(db: sqlite3.Connection, execution_id: str) -> bool:
    row = db.execute("SELECT cancel IS NOT NULL FROM tether_executions WHERE id = ?", (execution_id,)).fetchone()
    return row is not None and bool(row[0])


def _data_version(db: sqlite3.Connection) -> int:
    return int(db.execute("PRAGMA data_version").fetchone()[0])


# What a worker may take now, each kind read through the index that holds only its few rows
# (the store runs no ANALYZE, so SQLite's planner would rather walk the status index, through
# every paused execution): due ones by their wake time, and running ones whose lease ran out
# or was handed back. The same filters of the worker's runners in each, and each kind's oldest
# only: the oldest ``limit`` of all are among them (one writer at a time, none of them held).
_RUNNABLE_BY = ("AND (:roots IS NULL OR root_path IN (SELECT value FROM json_each(:roots))) "
                "AND (:pairs IS NULL OR version = '' "
                "     OR root_path || char(31) || version IN (SELECT value FROM json_each(:pairs)))")
_READY_SQL = (
    "SELECT * FROM (SELECT id, wake_at AS at FROM tether_executions INDEXED BY tether_executions_due "
    f"WHERE wake_at <= :now AND status IN ('queued', 'paused', 'decided') AND queue IS NULL {_RUNNABLE_BY} "
    "ORDER BY wake_at LIMIT :limit) "
    "UNION ALL "
    "SELECT * FROM (SELECT id, coalesce(wake_at, 0) AS at FROM tether_executions INDEXED BY tether_executions_leased "
    f"WHERE status = 'running' AND lease_expires_at IS NULL AND queue IS NULL {_RUNNABLE_BY} "
    "ORDER BY at LIMIT :limit) "
    "UNION ALL "
    "SELECT * FROM (SELECT id, coalesce(wake_at, lease_expires_at) AS at FROM tether_executions "
    "INDEXED BY tether_executions_leased "
    f"WHERE status = 'running' AND lease_expires_at <= :now AND queue IS NULL {_RUNNABLE_BY} "
    "ORDER BY lease_expires_at LIMIT :limit)"
)


def _pending_filter(execution_id: str | None, path_prefix: str | None) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    params: list[Any] = []
    if execution_id is not None:
        where.append("execution_id = ?")
        params.append(execution_id)
    if path_prefix:
        range_sql, range_args = _path_range(path_prefix)
        where.append(range_sql)
        params += range_args
    return where, params


def _path_range(prefix: str) -> tuple[str, list[Any]]:
    """Paths that start with ``prefix``, as a range of the path index (see `prefix_range`)."""
    low, high = prefix_range(prefix)
    return ("path >= ?", [low]) if high is None else ("path >= ? AND path < ?", [low, high])


def _few_under(db: sqlite3.Connection, prefix: str) -> bool:
    """Fewer than `FEW_UNDER_PREFIX` pending interrupts under ``prefix`` (counting no further)."""
    range_sql, range_args = _path_range(prefix)
    found = db.execute(f"SELECT count(*) FROM (SELECT 1 FROM tether_pending INDEXED BY tether_pending_by_path "
                       f"WHERE {range_sql} LIMIT {FEW_UNDER_PREFIX})", range_args).fetchone()[0]
    return int(found) < FEW_UNDER_PREFIX


def search_sql(s: ExecutionSearch, limit: int, before: Execution | None) -> tuple[str, list[Any]]:
    """`SQLiteStore.search_executions`'s query: only the filters given, each one an index serves."""
    where: list[str] = []
    params: list[Any] = []
    for column, value in (("status", s.status), ("root_path", s.root_path), ("version", s.version),
                          ("thread", s.thread)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    if s.since is not None:
        where.append("created_at >= ?")
        params.append(to_us(s.since))
    if s.until is not None:
        where.append("created_at < ?")
        params.append(to_us(s.until))
    # Prefixes as ranges of BINARY (byte) order: exact, case-sensitive and indexed (see `prefix_range`).
    if s.id_prefix:
        where.append(_prefixed("id", s.id_prefix, params))
    if s.path_prefix:
        below = _prefixed("root_path", s.path_prefix, params)
        above = ancestors(s.path_prefix)  # the roots of trees the prefix lies in
        if above:
            below = f"({below} OR root_path IN ({', '.join('?' for _ in above)}))"
            params += above
        where.append(below)
    if before is not None:
        where.append("(created_at, id) < (?, ?)")
        params += [to_us(before.created_at), before.execution_id]
    sql = f"SELECT {EXEC_COLS} FROM tether_executions"
    if where:
        sql += " WHERE " + " AND ".join(where)
    return sql + " ORDER BY created_at DESC, id DESC LIMIT ?", [*params, limit]


def _prefixed(column: str, prefix: str, params: list[Any]) -> str:
    """``column`` starts with ``prefix``, as a range its index serves; appends the bounds to ``params``."""
    low, high = prefix_range(prefix)
    params.append(low)
    if high is None:
        return f"{column} >= ?"
    params.append(high)
    return f"({column} >= ? AND {column} < ?)"


def _pending_paths(db: sqlite3.Connection, execution_id: str) -> list[str]:
    rows = db.execute("SELECT path FROM tether_pending WHERE execution_id = ? ORDER BY path", (execution_id,))
    return [r[0] for r in rows]


def _failed_claim(db: sqlite3.Connection, execution_id: str, path: str | None) -> StoreError:
    """Why a claim found nothing, from what the claim's own transaction sees (see `failed_claim`)."""
    found = db.execute(
        "SELECT status, cancel IS NOT NULL FROM tether_executions WHERE id = ?", (execution_id,)
    ).fetchone()
    if found is None:
        return failed_claim(execution_id, path, status=None)
    resumed = db.execute(
        "SELECT path FROM tether_journal WHERE execution_id = ? AND kind = 'resumed' "
        "AND (? IS NULL OR path = ?) ORDER BY seq DESC LIMIT 1",
        (execution_id, path, path),
    ).fetchone()
    return failed_claim(execution_id, path, status=found[0], pending=_pending_paths(db, execution_id),
                        last_resumed=None if resumed is None else resumed[0], cancelling=bool(found[1]))


def _execution(db: sqlite3.Connection, execution_id: str) -> Execution | None:
    row = db.execute(f"SELECT {EXEC_COLS} FROM tether_executions WHERE id = ?", (execution_id,)).fetchone()
    return None if row is None else execution_from(row)


def _journal(db: sqlite3.Connection, execution_id: str, after_seq: int, limit: int | None) -> list[JournalEntry]:
    cursor = db.execute(
        "SELECT seq, path, label, kind, payload, created_at FROM tether_journal "
        "WHERE execution_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        (execution_id, after_seq, -1 if limit is None else limit),
    )
    return [
        JournalEntry(execution_id=execution_id, seq=r[0], path=r[1], label=r[2],
                     kind=r[3], payload=_json.loads(r[4]), created_at=from_us(r[5]))
        for r in cursor
    ]
