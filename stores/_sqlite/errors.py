"""What a failed SQLite operation means: sqlite3's errors as tether's, and the damage a store remembers."""

from __future__ import annotations

import itertools
import logging
import os
import sqlite3
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from .._errors import StoreCorrupted, StoreError, StoreNotFound, StoreUnavailable

if TYPE_CHECKING:
    from .store import SQLiteStore

log = logging.getLogger("tether.stores")


def _read_only(path: str) -> bool:
    """Whether the OS refuses writes to the database file or the directory it needs."""
    target = Path(path)
    if not target.exists():
        target = target.parent
    return target.exists() and not os.access(target, os.W_OK)


_SQLITE_HEADER = b"SQLite format 3\x00"
_NEIGHBOURS_LOOKED_AT = 200  # directory entries a missing store's hint looks through
DAMAGE_HINT = (
    "Restore it from a backup, or point the store at another file; `tether doctor` lists the damage."
)


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


def not_found(path: str, what: str) -> StoreNotFound:
    """`StoreNotFound` for a store opened with ``create=False``, naming tether stores nearby."""
    near = _tether_stores_near(path)
    hint = f" (did you mean {' or '.join(near)}?)" if near else ""
    return StoreNotFound(
        f"No tether store at {path!r}: {what}{hint}. Nothing was created: the store was opened with "
        f"create=False. Check the path, or create the store: `tether migrate --store URL`, or open it "
        f"from a program that writes to it (your application, `tether worker`)."
    )


def missing_store(path: str) -> StoreNotFound | None:
    """`StoreNotFound` if there is no file at ``path`` (runs on a thread: it may list the directory)."""
    if os.path.exists(path):
        return None
    return not_found(path, "the file does not exist")


def refused(path: str, first: StoreCorrupted) -> StoreCorrupted:
    """What a store that found damage answers every later operation."""
    return StoreCorrupted(
        f"SQLite store {path!r} found damage earlier, so it refuses every operation since "
        f"(nothing was read or written now): {first} Open a new store once the file is repaired."
    )


def is_damage(exc: sqlite3.DatabaseError) -> bool:
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


class map_errors:
    """Translate sqlite3 errors into tether's, at the store boundary (``with map_errors(path, store):``).

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
                f"({exc.error_count()} errors, the first: {exc.errors()[0]['msg']}). {DAMAGE_HINT}"
            )
            self._found(error)
            raise error from exc
        if not isinstance(exc, sqlite3.DatabaseError):
            return
        if is_damage(exc):
            text = str(exc)
            if isinstance(exc, sqlite3.OperationalError):  # "Could not decode to UTF-8 column 'x' .."
                detail = text if len(text) <= 120 else text[:117] + "..."
                error = StoreCorrupted(
                    f"{path!r} is damaged: a stored text is not UTF-8 ({detail}). {DAMAGE_HINT}"
                )
            else:
                error = StoreCorrupted(f"{path!r} is not a usable SQLite database ({text}). {DAMAGE_HINT}")
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
        log.warning("SQLite store %s failed: %s (%s)", path, text, hint, extra={"store": str(path)})
        raise StoreUnavailable(f"SQLite store {path!r} failed: {text} ({hint}).") from exc

    def _found(self, damage: StoreCorrupted) -> None:
        store = self.store
        if store is not None and store._damage is None:
            store._damage = damage

