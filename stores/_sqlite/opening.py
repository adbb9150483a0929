"""Opening a SQLite file for tether: what it must hold, its journal mode and pragmas, its migrations."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING

from .._errors import SchemaVersionError, StoreCorrupted, StoreUnavailable
from .._migrations import SQLITE_MIGRATIONS
from .._protocol import SCHEMA_VERSION
from .errors import not_found
from .rows import now_us

if TYPE_CHECKING:
    from .store import SQLiteStore
    from .writes import WritePolicy

# What tether names its tables, indexes and triggers (LIKE ignores ASCII case, as SQLite's names do).
_TETHER_OBJECTS = r"SELECT name FROM sqlite_master WHERE name LIKE 'tether\_%' ESCAPE '\'"
_WAL_KEPT = 8 << 20  # bytes of WAL file kept when it starts over (after a burst, it shrinks back)


def existing_only(path: str) -> str:
    """A URI that opens ``path`` read-write and never creates it (sqlite3 creates a missing file)."""
    return Path(path).absolute().as_uri() + "?mode=rw"


def configure(db: sqlite3.Connection, store: SQLiteStore, policy: WritePolicy) -> None:
    """Check what the file holds, switch it to WAL, set its pragmas and migrate it (on its thread).

    Raises:
        SchemaVersionError: The file holds another version of tether's schema.
        StoreCorrupted: The file is not a tether store.
        StoreNotFound: ``create=False``, and the file has no tether tables.
    """
    # Look before changing anything: the switch to WAL rewrites the file's header, and a
    # file that is not a tether store (nor a database: this read is what refuses it) is
    # left exactly as it was.
    names = sorted(name for (name,) in db.execute(_TETHER_OBJECTS))
    current = None
    if "tether_schema" in names:
        current = db.execute("SELECT max(version) FROM tether_schema").fetchone()[0] or 0
        if current > SCHEMA_VERSION or (current < SCHEMA_VERSION and not store.create):
            raise SchemaVersionError(current, SCHEMA_VERSION)
    elif names:
        shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        raise StoreCorrupted(
            f"{store.path!r} is not a tether store: it holds objects named like tether's ({shown}) "
            f"that tether did not create (it has no tether_schema table). Nothing was changed. "
            f"Point the store at another file: an application's own tables may share a file "
            f"with tether's, but not under tether_ names."
        )
    elif not store.create:
        raise not_found(store.path, "the database has no tether tables")
    if store.create:  # create=False changes nothing in the file, its journal mode included
        _enter_wal(db, store.busy_timeout)
    db.execute(f"PRAGMA synchronous={store.synchronous}")
    if policy.inline:
        db.execute("PRAGMA wal_autocheckpoint=0")  # the store checkpoints itself (WritePolicy rule 5)
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
                (version, now_us()),
            )
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


class OpenedFile:
    """The database file a store opened, and whether its path still names that file.

    A process keeps writing to a SQLite file it holds open after the file's directory is
    deleted, renamed or unmounted: every commit lands in a file that no later process
    will find, and a run would go on as if its steps were saved. So each write
    transaction calls `check` before it commits (one ``stat``, about a microsecond).
    Once the same file is back at its path (the directory renamed back, the volume
    mounted again), writes go through again.
    """

    __slots__ = ("_identity", "path")

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)  # as SQLite resolved it: a later chdir changes nothing
        self._identity = self._now()

    def _now(self) -> tuple[int, int] | None:
        try:
            found = os.stat(self.path)
        except OSError:
            return None
        return found.st_dev, found.st_ino

    def check(self) -> None:
        """Raise `StoreUnavailable` unless the path still names the file the store opened."""
        if self._now() != self._identity:
            raise StoreUnavailable(
                f"SQLite store {self.path!r}: the database file this store opened is no longer at "
                f"that path (its directory was deleted, renamed or unmounted, or the file was "
                f"replaced); nothing was written. Put the file back where it was, then retry."
            )


def open_inline(store: SQLiteStore) -> sqlite3.Connection:
    """The connection for writes made on the caller's thread (`WritePolicy` rule 3).

    Its busy timeout is zero: it never waits for a lock.
    """
    here = sqlite3.connect(
        store.path if store.create else existing_only(store.path), timeout=0, isolation_level=None,
        check_same_thread=False, uri=not store.create,
    )
    try:
        here.execute("PRAGMA synchronous=NORMAL")
        here.execute("PRAGMA wal_autocheckpoint=0")
        here.execute(f"PRAGMA journal_size_limit={_WAL_KEPT}")
    except BaseException:
        here.close()
        raise
    return here


def _enter_wal(db: sqlite3.Connection, busy_timeout: float) -> None:
    """Switch the file to WAL, waiting out other processes that are doing the same.

    Switching needs an exclusive lock, and SQLite answers "locked" at once, without
    its busy handler, when two connections race to upgrade their shared locks (a
    fresh file opened by several starters). So retry here, on the connection's
    thread, for up to ``busy_timeout``.
    """
    deadline = time.monotonic() + busy_timeout
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
