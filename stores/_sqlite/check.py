"""`SQLiteStore.check`'s scan: SQLite's integrity check, then tether's own invariants, row by row."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import get_args

from .._models import ExecutionStatus
from .errors import is_damage

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
    ("tether_executions", ("id",), ("runner", "root_path", "fingerprint", "version", "status", "error", "lease_owner"),
     ("input", "result")),
    ("tether_journal", ("execution_id", "seq"), ("path", "label", "kind"), ("payload",)),
    ("tether_pending", ("execution_id", "path"), ("reason",), ("context", "default_value")),
    ("tether_idempotency", ("execution_id", "key"), (), ("value",)),
    ("tether_tokens", ("digest",), ("name",), ("scopes", "paths")),
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


def find_problems(path: str, timeout: float, opened: list[sqlite3.Connection]) -> tuple[list[str], bool]:
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
            if not is_damage(exc):
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
                if not is_damage(exc):
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
                if not is_damage(exc):
                    raise
                damaged = True
                report("unreadable", f"{table} cannot be read to its end: {exc}")
    finally:
        db.close()
    return _listed(by_kind), damaged

