"""Migrations: applied once, even when several starters open a fresh database at once."""

from __future__ import annotations

import sqlite3
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest
from tether.stores import (
    SCHEMA_VERSION,
    ExecutionSearch,
    Lease,
    NewEntry,
    PostgresStore,
    SQLiteStore,
    StaleLease,
    Store,
    TokenRow,
)
from tether.stores._migrations import POSTGRES_MIGRATIONS, SQLITE_MIGRATIONS

from tests._postgres import admin_script, admin_sql

STARTERS = 6


async def open_all_at_once(stores: list[Store]) -> None:
    async with anyio.create_task_group() as tg:
        for store in stores:
            tg.start_soon(store.setup)
    for store in stores:
        assert await store.count_pending() == 0
        await store.aclose()


async def test_concurrent_sqlite_starters(tmp_path: Path) -> None:
    path = tmp_path / "fresh.db"
    await open_all_at_once([SQLiteStore(path) for _ in range(STARTERS)])
    with sqlite3.connect(path) as db:
        versions = [row[0] for row in db.execute("SELECT version FROM tether_schema ORDER BY version")]
    assert versions == list(range(1, SCHEMA_VERSION + 1))


async def test_concurrent_postgres_starters(postgres_dsn: str, pg_schema: str) -> None:
    await open_all_at_once([PostgresStore(postgres_dsn, schema=pg_schema) for _ in range(STARTERS)])
    rows = await anyio.to_thread.run_sync(
        admin_sql, postgres_dsn, f"SELECT version FROM {pg_schema}.tether_schema ORDER BY version"
    )
    assert [row[0] for row in rows] == list(range(1, SCHEMA_VERSION + 1))


async def test_sqlite_database_is_in_wal_mode(tmp_path: Path) -> None:
    # WAL lets readers in other processes proceed while one process writes.
    async with SQLiteStore(tmp_path / "a.db") as store:
        await store.count_pending()
    with sqlite3.connect(tmp_path / "a.db") as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_a_version_1_sqlite_database_is_upgraded_in_place(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    with sqlite3.connect(path) as db:
        for version in (0, 1):
            for statement in SQLITE_MIGRATIONS[version]:
                db.execute(statement)
        db.execute("INSERT INTO tether_schema (version, applied_at) VALUES (1, 0)")
        db.execute("INSERT INTO tether_executions (id, runner, root_path, fingerprint, status, input, lease_epoch, "
                   "next_seq, created_at, updated_at) VALUES ('old', 'r', 'chain:r', '', 'paused', 'null', 1, 1, 0, 0)")
    async with SQLiteStore(path) as store:
        execution = await store.get_execution("old")
        assert execution is not None
        assert (execution.status, execution.wake_at) == ("paused", None)
    with sqlite3.connect(path) as db:
        versions = [r[0] for r in db.execute("SELECT version FROM tether_schema ORDER BY version")]
    assert versions == list(range(1, SCHEMA_VERSION + 1))


async def test_a_run_in_progress_keeps_its_numbering_across_the_sqlite_upgrade_to_3(tmp_path: Path) -> None:
    # Version 2 counted entries in tether_executions.next_seq; version 3 numbers them from
    # the journal. A run leased before the upgrade continues after the last entry it wrote.
    path = tmp_path / "v2.db"
    expires = (time.time_ns() // 1000) + 3_600_000_000
    with sqlite3.connect(path) as db:
        for version in (0, 1, 2):
            for statement in SQLITE_MIGRATIONS[version]:
                db.execute(statement)
        db.executemany("INSERT INTO tether_schema (version, applied_at) VALUES (?, 0)", [(1,), (2,)])
        db.execute("INSERT INTO tether_executions (id, runner, root_path, fingerprint, status, input, lease_owner, "
                   "lease_expires_at, lease_epoch, next_seq, created_at, updated_at) "
                   "VALUES ('old', 'r', 'chain:r', '', 'running', 'null', 'me', ?, 1, 4, 0, 0)", (expires,))
        db.executemany("INSERT INTO tether_journal (execution_id, seq, path, label, kind, payload, created_at) "
                       "VALUES ('old', ?, 'chain:r', ?, 'entry', '{}', 0)", [(i, f"node:n{i}") for i in (1, 2, 3)])
    async with SQLiteStore(path) as store:
        lease = Lease(execution_id="old", owner="me", epoch=1, expires_at=datetime.now(UTC) + timedelta(hours=1))
        assert await store.append(lease, [NewEntry(path="chain:r", label="node:n4")]) == [4]
        assert await store.append(lease, [NewEntry(path="chain:r", label=f"x{i}") for i in (5, 6)]) == [5, 6]
        assert [e.seq for e in await store.read_journal("old")] == [1, 2, 3, 4, 5, 6]
        with pytest.raises(StaleLease):
            await store.append(lease.model_copy(update={"epoch": 0}), [NewEntry(path="chain:r", label="late")])
    with sqlite3.connect(path) as db:
        columns = [row[1] for row in db.execute("PRAGMA table_info(tether_executions)")]
    assert "next_seq" not in columns


async def test_a_version_1_postgres_schema_is_upgraded_in_place(postgres_dsn: str, pg_schema: str) -> None:
    statements = [f'CREATE SCHEMA "{pg_schema}"', f'SET search_path TO "{pg_schema}"']
    statements += [s for version in (0, 1) for s in POSTGRES_MIGRATIONS[version]]
    statements += ["INSERT INTO tether_schema (version) VALUES (1)",
                   ("INSERT INTO tether_executions (id, runner, root_path, fingerprint, status, input, lease_epoch, "
                   "next_seq, created_at, updated_at) VALUES ('old', 'r', 'chain:r', '', 'paused', 'null', 1, 1, "
                   "now(), now())")]
    await anyio.to_thread.run_sync(admin_script, postgres_dsn, ";\n".join(statements))
    async with PostgresStore(postgres_dsn, schema=pg_schema) as store:
        execution = await store.get_execution("old")
        assert execution is not None
        assert (execution.status, execution.wake_at) == ("paused", None)
    rows = await anyio.to_thread.run_sync(
        admin_sql, postgres_dsn, f"SELECT version FROM {pg_schema}.tether_schema ORDER BY version"
    )
    assert [row[0] for row in rows] == list(range(1, SCHEMA_VERSION + 1))


async def searches_and_keeps_tokens(store: Store) -> None:
    """What schema 13 adds works on a database upgraded to it, holding an execution 'old' of chain:r."""
    assert [e.execution_id for e in await store.search_executions(
        ExecutionSearch(status="failed", path_prefix="chain:r/node:a"))] == ["old"]
    assert [e.execution_id for e in await store.search_executions(
        ExecutionSearch(root_path="chain:r", version=""))] == ["old"]
    await store.create_token(TokenRow(name="ops", digest="d", scopes=["read"], created_at=datetime.now(UTC)))
    assert [t.name for t in await store.list_tokens()] == ["ops"]


async def test_a_version_12_sqlite_database_gains_search_indexes_and_tokens(tmp_path: Path) -> None:
    path = tmp_path / "v12.db"
    with sqlite3.connect(path) as db:
        for version in range(13):
            for statement in SQLITE_MIGRATIONS[version]:
                db.execute(statement)
        db.executemany("INSERT INTO tether_schema (version, applied_at) VALUES (?, 0)", [(v,) for v in range(1, 13)])
        db.execute("INSERT INTO tether_executions (id, runner, root_path, fingerprint, status, input, lease_epoch, "
                   "created_at, updated_at) VALUES ('old', 'r', 'chain:r', '', 'failed', 'null', 1, 0, 0)")
    db.close()
    async with SQLiteStore(path) as store:
        await searches_and_keeps_tokens(store)
    with sqlite3.connect(path) as db:
        versions = [r[0] for r in db.execute("SELECT version FROM tether_schema ORDER BY version")]
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type IN ('index', 'table')")}
    db.close()
    assert versions == list(range(1, SCHEMA_VERSION + 1))
    assert {"tether_executions_by_status_created", "tether_executions_by_root_version",
            "tether_executions_by_root", "tether_executions_by_version",
            "tether_tokens", "tether_tokens_live"} <= names


async def test_a_version_12_postgres_schema_gains_search_indexes_and_tokens(postgres_dsn: str, pg_schema: str) -> None:
    statements = [f'CREATE SCHEMA "{pg_schema}"', f'SET search_path TO "{pg_schema}"']
    statements += [s for version in range(13) for s in POSTGRES_MIGRATIONS[version]]
    statements += [f"INSERT INTO tether_schema (version) VALUES ({v})" for v in range(1, 13)]
    statements.append("INSERT INTO tether_executions (id, runner, root_path, fingerprint, status, input, lease_epoch, "
                      "next_seq, created_at, updated_at) VALUES ('old', 'r', 'chain:r', '', 'failed', 'null', 1, 1, "
                      "now(), now())")
    await anyio.to_thread.run_sync(admin_script, postgres_dsn, ";\n".join(statements))
    async with PostgresStore(postgres_dsn, schema=pg_schema) as store:
        await searches_and_keeps_tokens(store)
    rows = await anyio.to_thread.run_sync(
        admin_sql, postgres_dsn,
        f"SELECT relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = '{pg_schema}'")
    assert {"tether_executions_by_status_created", "tether_executions_by_root_version",
            "tether_executions_by_root", "tether_executions_by_version",
            "tether_executions_by_id_prefix", "tether_tokens", "tether_tokens_live"} <= {r[0] for r in rows}
    versions = await anyio.to_thread.run_sync(
        admin_sql, postgres_dsn, f"SELECT version FROM {pg_schema}.tether_schema ORDER BY version")
    assert [row[0] for row in versions] == list(range(1, SCHEMA_VERSION + 1))
