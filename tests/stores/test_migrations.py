"""Migrations: applied once, even when several starters open a fresh database at once."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
from tether.stores import SCHEMA_VERSION, PostgresStore, SQLiteStore, Store

from tests._postgres import admin_sql

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
