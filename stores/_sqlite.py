"""`SQLiteStore`: the embedded default, on aiosqlite.

Every operation is one function run on aiosqlite's connection thread: a write is
``BEGIN IMMEDIATE`` .. ``COMMIT`` inside that function, so it costs one thread
crossing and cannot be torn by cancellation. ``BEGIN IMMEDIATE`` takes the write
lock up front: a deferred transaction that reads and then writes is what makes
another process's claim fail with "database is locked" instead of waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import sqlite3
import stat
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, get_args

import anyio
import anyio.to_thread
from pydantic import ValidationError

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
    StoreNotFound,
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


# What tether names its tables, indexes and triggers (LIKE ignores ASCII case, as SQLite's names do).
_TETHER_OBJECTS = r"SELECT name FROM sqlite_master WHERE name LIKE 'tether\_%' ESCAPE '\'"
_SQLITE_HEADER = b"SQLite format 3\x00"
_NEIGHBOURS_LOOKED_AT = 200  # directory entries a missing store's hint looks through
_DAMAGE_HINT = (
    "Restore it from a backup, or point the store at another file; `tether doctor` lists the damage."
)


def _existing_only(path: str) -> str:
    """A URI that opens ``path`` read-write and never creates it (sqlite3 creates a missing file)."""
    return Path(path).absolute().as_uri() + "?mode=rw"


def _tether_stores_near(path: str) -> list[str]:
    """URLs of the tether stores beside ``path``, for a hint: files with a ``tether_schema`` table.

    Only looked at: each file is opened ``immutable`` (no lock, no -wal or -shm
    file made), so a table still only in another store's WAL is not seen.
    """
    here = Path(path)
    found: list[str] = []
    try:
        names = sorted(entry.name for entry in itertools.islice(here.parent.iterdir(), _NEIGHBOURS_LOOKED_AT))
    except OSError:
        return found
    for name in names:
        candidate = here.parent / name
        if name == here.name or name.endswith(("-wal", "-shm", "-journal")):
            continue
        try:
            if not stat.S_ISREG(candidate.stat().st_mode):
                continue  # a directory, a FIFO (whose open would wait for a writer), a socket
            with candidate.open("rb") as file:
                if file.read(16) != _SQLITE_HEADER:
                    continue
            db = sqlite3.connect(candidate.absolute().as_uri() + "?immutable=1", uri=True)
        except (OSError, sqlite3.Error):
            continue  # a directory, unreadable, or not for us to open
        try:
            found_one = db.execute("SELECT 1 FROM sqlite_master WHERE name = 'tether_schema'").fetchone()
            if found_one:
                found.append("sqlite:///" + os.path.join(os.path.dirname(path), name))
        except sqlite3.Error:
            pass  # damaged, or being rewritten: no hint from it
        finally:
            db.close()
    return found


def _not_found(path: str, what: str) -> StoreNotFound:
    near = _tether_stores_near(path)
    hint = f" (did you mean {' or '.join(near)}?)" if near else ""
    return StoreNotFound(
        f"No tether store at {path!r}: {what}{hint}. Nothing was created: the store was opened with "
        f"create=False. Check the path, or create the store: `tether migrate --store URL`, or open it "
        f"from a program that writes to it (your application, `tether worker`)."
    )


def _missing_store(path: str) -> StoreNotFound | None:
    """`StoreNotFound` if there is no file at ``path`` (runs on a thread: it may list the directory)."""
    if os.path.exists(path):
        return None
    return _not_found(path, "the file does not exist")


def _refused(path: str, first: StoreCorrupted) -> StoreCorrupted:
    """What a store that found damage answers every later operation."""
    return StoreCorrupted(
        f"SQLite store {path!r} found damage earlier, so it refuses every operation since "
        f"(nothing was read or written now): {first} Open a new store once the file is repaired."
    )


def _is_damage(exc: sqlite3.DatabaseError) -> bool:
    """Whether a sqlite3 error means the file does not hold what SQLite or tether wrote."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None and code & 0xFF in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
        return True
    if type(exc) is sqlite3.DatabaseError or isinstance(exc, sqlite3.IntegrityError):
        # tether's statements meet every constraint, or handle the one they may not
        # (a duplicate interrupt): one that fails unhandled found an index out of step.
        return True
    # Raised by sqlite3 itself, with no error code, for a text column holding other bytes.
    return isinstance(exc, sqlite3.OperationalError) and str(exc).startswith("Could not decode to UTF-8")


class _map_errors:
    """Translate sqlite3 errors into tether's, at the store boundary (``with _map_errors(path, store):``).

    A class rather than a generator: it wraps every operation. Given the store,
    it also remembers the first damage found (any `StoreCorrupted`, tether's own
    JSON decoding included), and the store then refuses every later operation.
    """

    __slots__ = ("path", "store")

    def __init__(self, path: str, store: SQLiteStore | None = None) -> None:
        self.path = path
        self.store = store

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            return
        if isinstance(exc, StoreError):
            if isinstance(exc, StoreCorrupted):
                self._found(exc)
            return
        path = self.path
        if isinstance(exc, ValidationError):
            # A row read back that is not what tether writes (a status that is no status).
            error = StoreCorrupted(
                f"SQLite store {path!r} is damaged: a stored row does not hold what tether writes "
                f"({exc.error_count()} errors, the first: {exc.errors()[0]['msg']}). {_DAMAGE_HINT}"
            )
            self._found(error)
            raise error from exc
        if not isinstance(exc, sqlite3.DatabaseError):
            return
        if _is_damage(exc):
            text = str(exc)
            if isinstance(exc, sqlite3.OperationalError):  # "Could not decode to UTF-8 column 'x' .."
                detail = text if len(text) <= 120 else text[:117] + "..."
                error = StoreCorrupted(
                    f"{path!r} is damaged: a stored text is not UTF-8 ({detail}). {_DAMAGE_HINT}"
                )
            else:
                error = StoreCorrupted(f"{path!r} is not a usable SQLite database ({text}). {_DAMAGE_HINT}")
            self._found(error)
            raise error from exc
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

    def _found(self, damage: StoreCorrupted) -> None:
        store = self.store
        if store is not None and store._damage is None:
            store._damage = damage


_SHOWN_PER_KIND = 10  # problems of one kind that `check` lists; then it counts the rest

# tether's own invariants, as queries whose rows are problems, with the line each row makes.
_ORPHANS = (
    "SELECT CAST(execution_id AS BLOB), count(*) FROM {} "
    "WHERE execution_id NOT IN (SELECT id FROM tether_executions) GROUP BY execution_id"
)
_INVARIANTS = (
    *(
        (f"execution {{0!r}} has no row in tether_executions, but its {rows} remain ({{1}})",
         _ORPHANS.format(table))
        for table, rows in (("tether_journal", "journal entries"), ("tether_pending", "pending interrupts"),
                            ("tether_idempotency", "idempotency records"))
    ),
    (
        ("the pending interrupt of execution {0!r} at {1!r} names seq {2}, which is no 'suspended' "
         "entry of its journal"),
        ("SELECT CAST(p.execution_id AS BLOB), CAST(p.path AS BLOB), p.seq FROM tether_pending p "
         "WHERE p.execution_id IN (SELECT id FROM tether_executions) AND NOT EXISTS ("
         "SELECT 1 FROM tether_journal j WHERE j.execution_id = p.execution_id AND j.seq = p.seq "
         "AND j.kind = 'suspended')"),
    ),
)
# Every stored value is read back: (table, the columns that name a row, its other text, its JSON).
_VALUES = (
    ("tether_executions", ("id",), ("runner", "root_path", "fingerprint", "status", "error", "lease_owner"),
     ("input", "result")),
    ("tether_journal", ("execution_id", "seq"), ("path", "label", "kind"), ("payload",)),
    ("tether_pending", ("execution_id", "path"), ("reason",), ("context", "default_value")),
    ("tether_idempotency", ("execution_id", "key"), (), ("value",)),
)
_STATUSES = frozenset(get_args(ExecutionStatus))


def _shown(value: object) -> object:
    """A value of a damaged row, printable whatever its bytes are."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _listed(by_kind: dict[str, list[str]]) -> list[str]:
    """Problems, the first few of each kind, each kind's followed by how many more it has."""
    lines: list[str] = []
    for found in by_kind.values():
        lines += found[:_SHOWN_PER_KIND]
        if len(found) > _SHOWN_PER_KIND:
            lines.append(f"... and {len(found) - _SHOWN_PER_KIND} more like the line above")
    return lines


def _find_problems(path: str, timeout: float, opened: list[sqlite3.Connection]) -> tuple[list[str], bool]:
    """`SQLiteStore.check`'s work, on a thread and a read-only connection of its own.

    Returns the problems, and whether any is damage to the file (rather than rows
    that break tether's invariants). The connection goes into ``opened``, where
    a cancelled caller interrupts it; errors that are not damage are raised.
    """
    by_kind: dict[str, list[str]] = {}
    damaged = False

    def report(kind: str, line: str) -> None:
        by_kind.setdefault(kind, []).append(line)

    db = sqlite3.connect(Path(path).absolute().as_uri() + "?mode=ro", uri=True, timeout=timeout,
                         isolation_level=None, check_same_thread=False)
    opened.append(db)
    try:
        db.execute("BEGIN")  # one snapshot for every query below, whatever other processes write
        try:
            found = [row[0] for row in db.execute("PRAGMA integrity_check")]
        except sqlite3.DatabaseError as exc:
            if not _is_damage(exc):
                raise
            found = [f"it stopped: {exc}"]
        if found != ["ok"]:
            damaged = True
            for line in found:
                report("integrity", f"SQLite integrity_check: {line}")
        for line, sql in _INVARIANTS:
            try:
                for row in db.execute(sql):
                    report(line, line.format(*map(_shown, row)))
            except sqlite3.DatabaseError as exc:
                if not _is_damage(exc):
                    raise
                damaged = True
                report("unreadable", f"a check of tether's invariants could not read the tables: {exc}")
        for table, keys, texts, jsons in _VALUES:
            columns = (*keys, *texts, *jsons)
            sql = "SELECT " + ", ".join(f"CAST({c} AS BLOB)" for c in columns) + f" FROM {table}"
            try:
                for row in db.execute(sql):
                    name = f"{table} row ({', '.join(repr(_shown(v)) for v in row[:len(keys)])})"
                    for column, raw in zip(columns, row, strict=True):
                        if raw is None:
                            continue
                        try:
                            text = raw.decode("utf-8")
                        except UnicodeDecodeError:
                            damaged = True
                            report("utf-8", f"{name}: {column} is not UTF-8 text")
                            continue
                        if column in jsons:
                            try:
                                json.loads(text)
                            except ValueError as exc:
                                damaged = True
                                report("json", f"{name}: {column} is not JSON ({exc})")
                        elif column == "status" and text not in _STATUSES:
                            damaged = True
                            report("status", f"{name}: status {text!r} is no execution status")
            except sqlite3.DatabaseError as exc:
                if not _is_damage(exc):
                    raise
                damaged = True
                report("unreadable", f"{table} cannot be read to its end: {exc}")
    finally:
        db.close()
    return _listed(by_kind), damaged


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
        self.path = str(path)
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

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    # -- plumbing ------------------------------------------------------------

    async def _open(self) -> None:
        try:
            import aiosqlite
        except ImportError as exc:  # pragma: no cover - a dependency of tether
            raise StoreUnavailable("aiosqlite is missing: pip install tether") from exc
        target = self.path
        if not self.create:
            # sqlite3 creates a missing file on connect, so look first (on a thread: the hint
            # lists the directory), then connect with a URI that never creates one.
            missing = await asyncio.get_running_loop().run_in_executor(None, _missing_store, self.path)
            if missing is not None:
                raise missing
            target = _existing_only(self.path)
        conn = aiosqlite.connect(
            target, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False,
            uri=not self.create,
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
        # Look before changing anything: the switch to WAL rewrites the file's header, and a
        # file that is not a tether store (nor a database: this read is what refuses it) is
        # left exactly as it was.
        names = sorted(name for (name,) in db.execute(_TETHER_OBJECTS))
        current = None
        if "tether_schema" in names:
            current = db.execute("SELECT max(version) FROM tether_schema").fetchone()[0] or 0
            if current > SCHEMA_VERSION or (current < SCHEMA_VERSION and not self.create):
                raise SchemaVersionError(current, SCHEMA_VERSION)
        elif names:
            shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
            raise StoreCorrupted(
                f"{self.path!r} is not a tether store: it holds objects named like tether's ({shown}) "
                f"that tether did not create (it has no tether_schema table). Nothing was changed. "
                f"Point the store at another file: an application's own tables may share a file "
                f"with tether's, but not under tether_ names."
            )
        elif not self.create:
            raise _not_found(self.path, "the database has no tether tables")
        if self.create:  # create=False changes nothing in the file, its journal mode included
            self._enter_wal(db)
        db.execute(f"PRAGMA synchronous={self.synchronous}")
        if self.synchronous == "NORMAL":
            db.execute("PRAGMA wal_autocheckpoint=0")  # GroupCommit checkpoints on the thread
        db.execute(f"PRAGMA journal_size_limit={_WAL_KEPT}")
        if current == SCHEMA_VERSION:
            return  # nothing to migrate, so no write lock to wait for
        db.execute("BEGIN IMMEDIATE")
        try:
            for statement in SQLITE_MIGRATIONS[0]:
                db.execute(statement)
            # Again under the write lock: another starter may have migrated meanwhile.
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
        here = sqlite3.connect(
            self.path if self.create else _existing_only(self.path), timeout=0, isolation_level=None,
            check_same_thread=False, uri=not self.create,
        )
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
        # Opening does not mark the store damaged: its checks come before any write, and a
        # failed open runs them all again at the next operation.
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
        if self._damage is not None:
            raise _refused(self.path, self._damage)
        group = self._writer(self._driver_loop or await self._loop())
        with _map_errors(self.path, self):
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
            raise _refused(self.path, self._damage)
        group = self._writer(self._driver_loop or await self._loop())
        self._in_flight += 1  # what `_counted` does, without its coroutine: this is every boundary
        try:
            with _map_errors(self.path, self):
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
                "  WHERE ((status IN ('queued', 'paused', 'decided') AND wake_at <= ?) "
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
        recent: bool = False,
    ) -> list[Execution]:
        check_limit(limit)
        where: list[str] = []
        params: list[Any] = []
        if status is not None:
            where.append("status = ?")
            params.append(status)
        if after is not None and recent:
            where.append("(updated_at, id) < (?, ?)")
            params += [_us(after.updated_at), after.execution_id]
        elif after is not None:
            where.append("(created_at, id) > (?, ?)")
            params += [_us(after.created_at), after.execution_id]
        sql = f"SELECT {_EXEC_COLS} FROM tether_executions"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY updated_at DESC, id DESC LIMIT ?" if recent else " ORDER BY created_at, id LIMIT ?"
        params.append(limit)
        return await self._read(lambda db: [_execution(r) for r in db.execute(sql, params)])

    # -- leases ----------------------------------------------------------------

    async def acquire_lease(
        self, execution_id: str, *, owner: str, lease_seconds: float, replacing: str | None = None
    ) -> Lease:
        def fn(db: sqlite3.Connection, now: int) -> Lease:
            row = db.execute(
                "UPDATE tether_executions SET lease_owner = ?, lease_expires_at = ?, "
                "lease_epoch = lease_epoch + 1, status = 'running', updated_at = ? "
                f"WHERE id = ? AND status NOT IN {_FINAL_SQL} "
                "AND (lease_owner IS NULL OR lease_expires_at <= ? OR lease_owner = ? OR lease_owner = ?) "
                "RETURNING lease_epoch, lease_expires_at",
                (owner, now + _span(lease_seconds), now, execution_id, now, owner, replacing),
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
            db.execute(
                "UPDATE tether_executions SET wake_at = ?, updated_at = ?, "
                "status = CASE status WHEN 'paused' THEN 'decided' ELSE status END WHERE id = ?",
                (now, now, execution_id),
            )
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
            with _map_errors(self.path):
                problems, damaged = await anyio.to_thread.run_sync(
                    _find_problems, self.path, self.busy_timeout, opened, abandon_on_cancel=True
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
                f"{problems[0]} {_DAMAGE_HINT}"
            )
        return problems


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
    # A decision already journaled answers a second click, even once the run has finished;
    # but a cancelled execution is said to be cancelled, whatever was decided before.
    if found[0] != "cancelled" and ((path is not None and path in pending) or resumed is not None):
        return AlreadyResumed(execution_id, path if path is not None else resumed[0])
    if found[0] in FINAL_STATUSES:
        return ExecutionFinished(execution_id, found[0])
    return NoPendingInterrupt(execution_id, path, pending)
