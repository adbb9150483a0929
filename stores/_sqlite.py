"""`SQLiteStore`: the embedded default, on aiosqlite.

Every operation is one function run on aiosqlite's connection thread: a write is
``BEGIN IMMEDIATE`` .. ``COMMIT`` inside that function, so it costs one thread
crossing and cannot be torn by cancellation. ``BEGIN IMMEDIATE`` takes the write
lock up front: a deferred transaction that reads and then writes is what makes
another process's claim fail with "database is locked" instead of waiting.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from . import _json
from ._bridge import other_loop_error
from ._driver import DriverStore
from ._errors import (
    AlreadyResumed,
    ConfigurationError,
    DuplicateInterrupt,
    ExecutionFinished,
    ExecutionNotFound,
    LeaseHeld,
    NoPendingInterrupt,
    SchemaVersionError,
    StaleLease,
    StoreCorrupted,
    StoreError,
    StoreUnavailable,
)
from ._json import entry_rows
from ._migrations import SQLITE_MIGRATIONS
from ._models import (
    FINAL_STATUSES,
    Execution,
    ExecutionStatus,
    IdempotencyRecord,
    JournalEntry,
    Lease,
    NewEntry,
    NewExecution,
    NewInterrupt,
    PendingInterrupt,
    StartResult,
)
from ._protocol import SCHEMA_VERSION, check_limit
from ._sqlite_worker import GroupCommit

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import aiosqlite
    from pydantic import JsonValue

    from ._bridge import DriverLoop


T = TypeVar("T")
Synchronous = Literal["FULL", "NORMAL"]

_EXEC_COLS = (
    "id, runner, root_path, fingerprint, status, input, result, error, "
    "lease_owner, lease_expires_at, lease_epoch, created_at, updated_at, wake_at"
)
_PENDING_COLS = "execution_id, path, reason, context, seq, created_at, deadline, default_value"
_FINAL_SQL = "('completed', 'failed', 'cancelled')"

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
_WAL_KEPT = 8 << 20  # bytes of WAL file kept when it starts over (after a burst, it shrinks back)
_SEQ_HINTS_KEPT = 4096  # executions whose next number a store remembers; then it starts over


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _now() -> int:
    """Times are stored as integer microseconds since the epoch: exact both ways."""
    return time.time_ns() // 1000


def _us(moment: datetime) -> int:
    return (moment - _EPOCH) // _MICROSECOND


def _span(seconds: float) -> int:
    return int(seconds * 1_000_000)


def _ts(value: int) -> datetime:
    return _EPOCH + timedelta(microseconds=value)


def _ts_or_none(value: int | None) -> datetime | None:
    return None if value is None else _ts(value)


def _execution(row: Sequence[Any]) -> Execution:
    return Execution(
        execution_id=row[0],
        runner=row[1],
        root_path=row[2],
        fingerprint=row[3],
        status=row[4],
        input=_json.loads(row[5]),
        result=None if row[6] is None else _json.loads(row[6]),
        error=row[7],
        lease_owner=row[8],
        lease_expires_at=_ts_or_none(row[9]),
        lease_epoch=row[10],
        created_at=_ts(row[11]),
        updated_at=_ts(row[12]),
        wake_at=_ts_or_none(row[13]),
    )


def _pending(row: Sequence[Any]) -> PendingInterrupt:
    return PendingInterrupt(
        execution_id=row[0],
        agent_path=row[1],
        reason=row[2],
        context=_json.loads(row[3]),
        seq=row[4],
        created_at=_ts(row[5]),
        deadline=_ts_or_none(row[6]),
        default=None if row[7] is None else _json.loads(row[7]),
    )


def _read_only(path: str) -> bool:
    """Whether the OS refuses writes to the database file or the directory it needs."""
    target = Path(path)
    if not target.exists():
        target = target.parent
    return target.exists() and not os.access(target, os.W_OK)


class _map_errors:
    """Translate sqlite3 errors into tether's, at the store boundary (``with _map_errors(path):``).

    A class rather than a generator: it wraps every operation.
    """

    __slots__ = ("path",)

    def __init__(self, path: str) -> None:
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc is None or isinstance(exc, StoreError) or not isinstance(exc, sqlite3.DatabaseError):
            return
        path = self.path
        if isinstance(exc, sqlite3.OperationalError):
            text = str(exc)
            if "locked" in text or "busy" in text:
                hint = "another process held the write lock past busy_timeout; retry, or raise busy_timeout"
            elif "readonly" in text or _read_only(path):
                hint = (
                    "the file or its directory is read-only (its mode or its mount); "
                    "make it writable, then retry: nothing was written"
                )
            elif "full" in text:
                hint = "the disk is full; free space, then retry: nothing was written"
            elif "unable to open" in text:
                hint = "check that the directory exists and is writable"
            else:
                hint = "check the file and its directory"
            raise StoreUnavailable(f"SQLite store {path!r} failed: {text} ({hint}).") from exc
        raise StoreCorrupted(
            f"{path!r} is not a usable SQLite database ({exc}). Restore it from a backup, "
            f"or point the store at another file."
        ) from exc


class SQLiteStore(DriverStore):
    """A store in one SQLite file, shared safely by several processes.

    Args:
        path: The database file; created with its tables if missing.
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
        synchronous: Synchronous = "FULL",
        busy_timeout: float = 30.0,
    ) -> None:
        super().__init__()
        if synchronous not in ("FULL", "NORMAL"):
            raise ConfigurationError(
                f"synchronous={synchronous!r} is not supported; use 'FULL' or 'NORMAL'."
            )
        self.path = str(path)
        self.synchronous: Synchronous = synchronous
        self.busy_timeout = busy_timeout
        self._conn: aiosqlite.Connection | None = None
        self._group: GroupCommit | None = None
        # Execution id -> the number its next entry should get, as this store last wrote it.
        # Only a hint: the statement that uses it checks it (another process may append).
        self._next_seqs: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    # -- plumbing ------------------------------------------------------------

    async def _open(self) -> None:
        try:
            import aiosqlite
        except ImportError as exc:  # pragma: no cover - a dependency of tether
            raise StoreUnavailable("aiosqlite is missing: pip install tether") from exc
        conn = aiosqlite.connect(
            self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False
        )
        # aiosqlite's worker thread is not a daemon: a script that forgets to close
        # the store would hang at exit waiting for it. Committed data is safe either way.
        conn._thread.daemon = True
        try:
            with _map_errors(self.path):
                await conn
        except BaseException:
            # A failed connect leaves aiosqlite stopping its thread, which then calls
            # back into this loop; wait for it so it never finds the loop closed.
            await asyncio.get_running_loop().run_in_executor(None, conn._thread.join, 10)
            raise
        self._conn = conn
        try:
            await self._call(self._configure)
            here = None
            if self.synchronous == "NORMAL":  # a commit that does not fsync may run on the loop
                here = await self._call(self._open_here)
        except BaseException:
            await conn.close()
            self._conn = None
            raise
        self._group = GroupCommit(conn, _now, here=here)

    def _configure(self, db: sqlite3.Connection) -> None:
        self._enter_wal(db)
        db.execute(f"PRAGMA synchronous={self.synchronous}")
        if self.synchronous == "NORMAL":
            db.execute("PRAGMA wal_autocheckpoint=0")  # GroupCommit checkpoints on the thread
        db.execute(f"PRAGMA journal_size_limit={_WAL_KEPT}")
        db.execute("BEGIN IMMEDIATE")
        try:
            for statement in SQLITE_MIGRATIONS[0]:
                db.execute(statement)
            row = db.execute("SELECT max(version) FROM tether_schema").fetchone()
            current = row[0] or 0
            if current > SCHEMA_VERSION:
                raise SchemaVersionError(current, SCHEMA_VERSION)
            for version in range(current + 1, SCHEMA_VERSION + 1):
                for statement in SQLITE_MIGRATIONS[version]:
                    db.execute(statement)
                db.execute(
                    "INSERT INTO tether_schema (version, applied_at) VALUES (?, ?)",
                    (version, _now()),
                )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _open_here(self, _: sqlite3.Connection) -> sqlite3.Connection:
        """The connection for writes made on the caller's thread: it never waits for a lock."""
        here = sqlite3.connect(self.path, timeout=0, isolation_level=None, check_same_thread=False)
        try:
            here.execute("PRAGMA synchronous=NORMAL")
            here.execute("PRAGMA wal_autocheckpoint=0")
            here.execute(f"PRAGMA journal_size_limit={_WAL_KEPT}")
        except BaseException:
            here.close()
            raise
        return here

    def _enter_wal(self, db: sqlite3.Connection) -> None:
        """Switch the file to WAL, waiting out other processes that are doing the same.

        Switching needs an exclusive lock, and SQLite answers "locked" at once, without
        its busy handler, when two connections race to upgrade their shared locks (a
        fresh file opened by several starters). So retry here, on the connection's
        thread, for up to ``busy_timeout``.
        """
        deadline = time.monotonic() + self.busy_timeout
        pause = 0.005
        while True:
            try:
                db.execute("PRAGMA journal_mode=WAL").fetchone()
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() + pause > deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.1)

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

    async def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the connection's thread (one crossing)."""
        conn = self._conn
        if conn is None:  # pragma: no cover - guarded by DriverStore
            raise StoreUnavailable(f"{self!r} is not open")
        with _map_errors(self.path):
            # aiosqlite's public API crosses to its thread once per statement; a
            # whole transaction in one crossing needs its queue method.
            return await conn._execute(fn, conn._conn)  # type: ignore[no-untyped-call, no-any-return]

    def _writer(self, loop: DriverLoop) -> GroupCommit:
        """The connection's reader and writer, checked to belong to the caller's event loop."""
        if not loop.reachable():
            raise other_loop_error()
        if self._group is None:  # pragma: no cover - guarded by DriverStore
            raise StoreUnavailable(f"{self!r} is not open")
        return self._group

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the connection's thread straight from the caller's loop."""
        group = self._writer(self._driver_loop or await self._loop())
        with _map_errors(self.path):
            return await self._counted(group.read(fn))

    async def _write(self, fn: Callable[[sqlite3.Connection, int], T], *, one_statement: bool = False) -> T:
        """Run ``fn(db, now)`` inside ``BEGIN IMMEDIATE`` .. ``COMMIT``, shared with concurrent writes.

        Once queued, the function runs to COMMIT or ROLLBACK on its thread; a
        cancelled caller waits for that outcome rather than guess it. With
        ``one_statement`` (see `GroupCommit.write`), ``fn`` must write with one
        statement and step it to its end (``fetchall``, not ``fetchone``).
        """
        group = self._writer(self._driver_loop or await self._loop())
        self._in_flight += 1  # what `_counted` does, without its coroutine: this is every boundary
        try:
            with _map_errors(self.path):
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

        def fn(db: sqlite3.Connection, now: int) -> StartResult:
            row = db.execute(
                f"INSERT INTO tether_executions ({_EXEC_COLS}) "
                "VALUES (?, ?, ?, ?, 'running', ?, NULL, NULL, ?, ?, 1, ?, ?, NULL) "
                f"ON CONFLICT (id) DO NOTHING RETURNING {_EXEC_COLS}",
                (new.execution_id, new.runner, new.root_path, new.fingerprint, input_json,
                 owner, now + _span(lease_seconds), now, now),
            ).fetchone()
            if row is not None:
                execution = _execution(row)
                lease = Lease(execution_id=new.execution_id, owner=owner, epoch=1,
                              expires_at=_ts(now + _span(lease_seconds)))
                return StartResult(execution=execution, created=True, lease=lease)
            row = db.execute(
                f"SELECT {_EXEC_COLS} FROM tether_executions WHERE id = ?", (new.execution_id,)
            ).fetchone()
            return StartResult(execution=_execution(row), created=False)

        return await self._write(fn)

    async def enqueue_execution(self, new: NewExecution) -> StartResult:
        input_json = _json.dumps(new.input, what="the execution's input")

        def fn(db: sqlite3.Connection, now: int) -> StartResult:
            row = db.execute(
                f"INSERT INTO tether_executions ({_EXEC_COLS}) "
                "VALUES (?, ?, ?, ?, 'queued', ?, NULL, NULL, NULL, NULL, 0, ?, ?, ?) "
                f"ON CONFLICT (id) DO NOTHING RETURNING {_EXEC_COLS}",
                (new.execution_id, new.runner, new.root_path, new.fingerprint, input_json, now, now, now),
            ).fetchone()
            if row is not None:
                return StartResult(execution=_execution(row), created=True)
            row = db.execute(
                f"SELECT {_EXEC_COLS} FROM tether_executions WHERE id = ?", (new.execution_id,)
            ).fetchone()
            return StartResult(execution=_execution(row), created=False)

        return await self._write(fn)

    async def take_work(
        self, *, owner: str, lease_seconds: float, limit: int, roots: Sequence[str] | None = None
    ) -> list[Lease]:
        check_limit(limit)
        root_list = None if roots is None else _json.dumps(list(roots))

        def fn(db: sqlite3.Connection, now: int) -> list[Lease]:
            # BEGIN IMMEDIATE already excludes every other writer, so no row-level locking is needed.
            expires = now + _span(lease_seconds)
            rows = db.execute(
                "UPDATE tether_executions SET lease_owner = ?, lease_expires_at = ?, "
                "lease_epoch = lease_epoch + 1, status = 'running', wake_at = NULL, updated_at = ? "
                "WHERE id IN (SELECT id FROM tether_executions "
                "  WHERE ((status IN ('queued', 'paused') AND wake_at <= ?) "
                "     OR (status = 'running' AND coalesce(lease_expires_at, 0) <= ?)) "
                "    AND (? IS NULL OR root_path IN (SELECT value FROM json_each(?))) "
                "  ORDER BY coalesce(wake_at, lease_expires_at, 0) LIMIT ?) "
                "RETURNING id, lease_epoch",
                (owner, expires, now, now, now, root_list, root_list, limit),
            ).fetchall()
            return [Lease(execution_id=r[0], owner=owner, epoch=r[1], expires_at=_ts(expires)) for r in rows]

        return await self._write(fn)

    async def get_execution(self, execution_id: str) -> Execution | None:
        def fn(db: sqlite3.Connection) -> Execution | None:
            row = db.execute(
                f"SELECT {_EXEC_COLS} FROM tether_executions WHERE id = ?", (execution_id,)
            ).fetchone()
            return None if row is None else _execution(row)

        return await self._read(fn)

    async def list_executions(
        self,
        *,
        status: ExecutionStatus | None = None,
        limit: int = 100,
        after: Execution | None = None,
    ) -> list[Execution]:
        check_limit(limit)
        where: list[str] = []
        params: list[Any] = []
        if status is not None:
            where.append("status = ?")
            params.append(status)
        if after is not None:
            where.append("(created_at, id) > (?, ?)")
            params += [_us(after.created_at), after.execution_id]
        sql = f"SELECT {_EXEC_COLS} FROM tether_executions"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at, id LIMIT ?"
        params.append(limit)
        return await self._read(lambda db: [_execution(r) for r in db.execute(sql, params)])

    # -- leases ----------------------------------------------------------------

    async def acquire_lease(self, execution_id: str, *, owner: str, lease_seconds: float) -> Lease:
        def fn(db: sqlite3.Connection, now: int) -> Lease:
            row = db.execute(
                "UPDATE tether_executions SET lease_owner = ?, lease_expires_at = ?, "
                "lease_epoch = lease_epoch + 1, status = 'running', updated_at = ? "
                f"WHERE id = ? AND status NOT IN {_FINAL_SQL} "
                "AND (lease_owner IS NULL OR lease_expires_at <= ? OR lease_owner = ?) "
                "RETURNING lease_epoch, lease_expires_at",
                (owner, now + _span(lease_seconds), now, execution_id, now, owner),
            ).fetchone()
            if row is not None:
                return Lease(execution_id=execution_id, owner=owner, epoch=row[0],
                             expires_at=_ts(row[1]))
            found = db.execute(
                "SELECT status, lease_owner, lease_expires_at FROM tether_executions WHERE id = ?",
                (execution_id,),
            ).fetchone()
            if found is None:
                raise ExecutionNotFound(execution_id)
            if found[0] in FINAL_STATUSES:
                raise ExecutionFinished(execution_id, found[0])
            raise LeaseHeld(execution_id, found[1], _ts(found[2]))

        return await self._write(fn)

    async def renew_lease(self, lease: Lease, *, lease_seconds: float) -> Lease:
        def fn(db: sqlite3.Connection, now: int) -> Lease:
            row = db.execute(
                "UPDATE tether_executions SET lease_expires_at = ? "
                "WHERE id = ? AND lease_epoch = ? AND lease_owner = ? RETURNING lease_expires_at",
                (now + _span(lease_seconds), lease.execution_id, lease.epoch, lease.owner),
            ).fetchone()
            if row is None:
                raise self._fence_error(db, lease)
            return lease.model_copy(update={"expires_at": _ts(row[0])})

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
        wake = None if final or wake_at is None else _us(wake_at)

        def fn(db: sqlite3.Connection, now: int) -> list[int]:
            self._fence(
                db, lease,
                "lease_owner = NULL, lease_expires_at = NULL, status = coalesce(?, status), "
                "result = CASE WHEN ? THEN ? ELSE result END, "
                "error = CASE WHEN ? THEN ? ELSE error END, updated_at = ?, wake_at = ?",
                (status, final, result_json, final, error, now, wake),
            )
            if final:
                db.execute("DELETE FROM tether_pending WHERE execution_id = ?", (lease.execution_id,))
            return self._insert_entries(db, lease.execution_id, rows, now)

        return await self._write(fn)

    # -- journal -------------------------------------------------------------

    async def append(self, lease: Lease, entries: Sequence[NewEntry]) -> list[int]:
        rows = entry_rows(entries)
        if len(rows) == 1:
            row = rows[0]
            return await self._write(lambda db, now: [self._append_one(db, lease, row, now)], one_statement=True)
        if not rows:
            return []

        def fn(db: sqlite3.Connection, now: int) -> list[int]:
            self._fence(db, lease)
            return self._insert_entries(db, lease.execution_id, rows, now)

        return await self._write(fn)

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

    async def read_journal(
        self, execution_id: str, *, after_seq: int = 0, limit: int | None = None
    ) -> list[JournalEntry]:
        check_limit(limit)
        def fn(db: sqlite3.Connection) -> list[JournalEntry]:
            cursor = db.execute(
                "SELECT seq, path, label, kind, payload, created_at FROM tether_journal "
                "WHERE execution_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (execution_id, after_seq, -1 if limit is None else limit),
            )
            return [
                JournalEntry(execution_id=execution_id, seq=r[0], path=r[1], label=r[2],
                             kind=r[3], payload=_json.loads(r[4]), created_at=_ts(r[5]))
                for r in cursor
            ]

        return await self._read(fn)

    async def suspend(
        self, lease: Lease, entries: Sequence[NewEntry], interrupt: NewInterrupt
    ) -> PendingInterrupt:
        rows = entry_rows(entries)
        context_json = _json.dumps(interrupt.context, what="the interrupt's context")
        default_json = _json.dumps(interrupt.default, what="the interrupt's default")
        deadline = None if interrupt.deadline is None else _us(interrupt.deadline)

        def fn(db: sqlite3.Connection, now: int) -> PendingInterrupt:
            self._fence(db, lease)
            seqs = self._insert_entries(db, lease.execution_id, rows, now)
            seq = seqs[-1] if seqs else self._next_seq(db, lease.execution_id) - 1
            try:
                row = db.execute(
                    f"INSERT INTO tether_pending ({_PENDING_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                    f"RETURNING {_PENDING_COLS}",
                    (lease.execution_id, interrupt.path, interrupt.reason, context_json, seq, now,
                     deadline, default_json),
                ).fetchone()
            except sqlite3.IntegrityError as exc:
                raise DuplicateInterrupt(lease.execution_id, interrupt.path) from exc
            return _pending(row)

        return await self._write(fn)

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
        def fn(db: sqlite3.Connection, now: int) -> JournalEntry:
            target = path
            if target is None:
                paths = [r[0] for r in db.execute(
                    "SELECT path FROM tether_pending WHERE execution_id = ? ORDER BY path",
                    (execution_id,),
                )]
                if len(paths) > 1:
                    raise NoPendingInterrupt(execution_id, None, paths)
                target = paths[0] if paths else None
            row = None
            if target is not None:
                row = db.execute(
                    "DELETE FROM tether_pending WHERE execution_id = ? AND path = ? "
                    "AND (? IS NULL OR seq = ?) RETURNING reason, seq",
                    (execution_id, target, seq, seq),
                ).fetchone()
            if row is None or target is None:
                raise _explain_failed_claim(db, execution_id, target)
            held = db.execute(
                "SELECT lease_owner, lease_expires_at FROM tether_executions WHERE id = ? "
                "AND lease_owner IS NOT NULL AND lease_expires_at > ? AND lease_owner IS NOT ?",
                (execution_id, now, owner),
            ).fetchone()
            if held is not None:  # raising rolls the DELETE back: nothing is consumed
                raise LeaseHeld(execution_id, held[0], _ts(held[1]))
            payload: dict[str, JsonValue] = {"value": value, "suspended_seq": row[1], "reason": row[0]}
            if by is not None:
                payload["by"] = by
            payload_json = _json.dumps(payload, what="the resume value")
            db.execute("UPDATE tether_executions SET wake_at = ? WHERE id = ?", (now, execution_id))
            resumed = (target, "resumed", "resumed", payload_json)
            [resumed_seq] = self._insert_entries(db, execution_id, [resumed], now)
            return JournalEntry(execution_id=execution_id, seq=resumed_seq, path=target,
                                label="resumed", kind="resumed", payload=payload,
                                created_at=_ts(now))

        # Serialize the value before the transaction: a bad one consumes nothing.
        _json.dumps(value, what="the resume value")
        return await self._write(fn)

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
        where, params = _pending_filter(execution_id, path_prefix)
        if due_before is not None:
            where.append("deadline <= ?")
            params.append(_us(due_before))
        if after is not None:
            where.append("(created_at, execution_id, path) > (?, ?, ?)")
            params += [_us(after.created_at), after.execution_id, after.agent_path]
        sql = f"SELECT {_PENDING_COLS} FROM tether_pending"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at, execution_id, path LIMIT ?"
        params.append(limit)
        return await self._read(lambda db: [_pending(r) for r in db.execute(sql, params)])

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
                                     value=_json.loads(row[0]), created_at=_ts(row[1]))

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
                                     value=_json.loads(row[0]), created_at=_ts(row[1]))

        return await self._write(fn)

    # -- maintenance ---------------------------------------------------------

    async def delete_execution(self, execution_id: str) -> bool:
        def fn(db: sqlite3.Connection, now: int) -> bool:
            for table in ("tether_journal", "tether_pending", "tether_idempotency"):
                db.execute(f"DELETE FROM {table} WHERE execution_id = ?", (execution_id,))
            cursor = db.execute("DELETE FROM tether_executions WHERE id = ?", (execution_id,))
            return cursor.rowcount > 0

        return await self._write(fn)

    async def prune(self, *, older_than: datetime) -> int:
        cutoff = _us(older_than)

        def fn(db: sqlite3.Connection, now: int) -> int:
            doomed = f"SELECT id FROM tether_executions WHERE status IN {_FINAL_SQL} AND updated_at < ?"
            for table in ("tether_journal", "tether_pending", "tether_idempotency"):
                db.execute(f"DELETE FROM {table} WHERE execution_id IN ({doomed})", (cutoff,))
            cursor = db.execute(
                f"DELETE FROM tether_executions WHERE status IN {_FINAL_SQL} AND updated_at < ?",
                (cutoff,),
            )
            return cursor.rowcount

        return await self._write(fn)




def _pending_filter(execution_id: str | None, path_prefix: str | None) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    params: list[Any] = []
    if execution_id is not None:
        where.append("execution_id = ?")
        params.append(execution_id)
    if path_prefix:
        where.append("substr(path, 1, length(?)) = ?")
        params += [path_prefix, path_prefix]
    return where, params


def _explain_failed_claim(db: sqlite3.Connection, execution_id: str, path: str | None) -> StoreError:
    """Say why a claim found nothing: already resumed, never pending, or no execution."""
    found = db.execute("SELECT status FROM tether_executions WHERE id = ?", (execution_id,)).fetchone()
    if found is None:
        return ExecutionNotFound(execution_id)
    pending = [r[0] for r in db.execute(
        "SELECT path FROM tether_pending WHERE execution_id = ? ORDER BY path", (execution_id,)
    )]
    resumed = db.execute(
        "SELECT path FROM tether_journal WHERE execution_id = ? AND kind = 'resumed' "
        "AND (? IS NULL OR path = ?) ORDER BY seq DESC LIMIT 1",
        (execution_id, path, path),
    ).fetchone()
    # A decision already journaled answers a second click, even once the run has finished.
    if (path is not None and path in pending) or resumed is not None:
        return AlreadyResumed(execution_id, path if path is not None else resumed[0])
    if found[0] in FINAL_STATUSES:
        return ExecutionFinished(execution_id, found[0])
    return NoPendingInterrupt(execution_id, path, pending)
