"""create=False opens only an existing tether store, and changes nothing where there is none.

Also: a database holding tether-named tables that tether did not create is refused
with StoreCorrupted before anything is written, whatever ``create`` says.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
from typing import TYPE_CHECKING

import anyio
import pytest
from tether.stores import (
    SCHEMA_VERSION,
    NewEntry,
    NewExecution,
    NewInterrupt,
    PostgresStore,
    SchemaVersionError,
    SQLiteStore,
    StoreCorrupted,
    StoreNotFound,
    open_store,
)
from tether.stores._migrations import POSTGRES_MIGRATIONS, SQLITE_MIGRATIONS

from tests._postgres import admin_script, admin_sql

if TYPE_CHECKING:
    from pathlib import Path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def journal_mode(path: Path) -> str:
    with sqlite3.connect(path) as db:
        return str(db.execute("PRAGMA journal_mode").fetchone()[0])


async def make_tether_store(path: Path) -> None:
    async with SQLiteStore(path) as store:
        started = await store.start_execution(
            NewExecution(execution_id="ex", runner="r", root_path="agent:a"), owner="me", lease_seconds=60
        )
        assert started.lease is not None
        await store.suspend(started.lease, [NewEntry(path="agent:a/tool:t", label="s", kind="suspended")],
                            NewInterrupt(path="agent:a/tool:t", reason="approval"))
        await store.release_lease(started.lease, status="paused")


def make_app_database(path: Path, *tables: str) -> None:
    """A database of someone else's, in rollback-journal mode (SQLite's default)."""
    with sqlite3.connect(path) as db:
        for table in tables:
            db.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, note TEXT)")
            db.execute(f"INSERT INTO {table} (note) VALUES ('mine')")
    assert journal_mode(path) == "delete"


# -- SQLite: create=False ---------------------------------------------------------


async def test_a_missing_file_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "typo.db"
    for store in (SQLiteStore(path, create=False), open_store(f"sqlite:///{path}", create=False)):
        with pytest.raises(StoreNotFound, match=r"No tether store at '.*typo\.db': the file does not exist"):
            await store.setup()
        with pytest.raises(StoreNotFound):  # every operation says so, and a retry looks again
            await store.list_pending()
        await store.aclose()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


async def test_a_missing_file_names_the_tether_stores_beside_it(tmp_path: Path) -> None:
    await make_tether_store(tmp_path / "tether.db")
    make_app_database(tmp_path / "other.db", "notes")
    (tmp_path / "readme.txt").write_text("not a database")
    with pytest.raises(StoreNotFound) as info:
        await open_store(f"sqlite:///{tmp_path}/typo.db", create=False).setup()
    assert f"(did you mean sqlite:///{tmp_path}/tether.db?)" in str(info.value)
    assert "other.db" not in str(info.value)
    assert not (tmp_path / "typo.db").exists()


async def test_a_database_without_tether_tables_is_left_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    make_app_database(path, "notes")
    before = digest(path)
    with pytest.raises(StoreNotFound, match=r"'.*app\.db': the database has no tether tables"):
        await SQLiteStore(path, create=False).setup()
    assert digest(path) == before
    assert journal_mode(path) == "delete"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]


async def test_an_empty_file_is_no_store_either(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.touch()
    with pytest.raises(StoreNotFound):
        await SQLiteStore(path, create=False).setup()
    assert path.read_bytes() == b""


async def test_an_older_schema_is_not_migrated(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    with sqlite3.connect(path) as db:
        for version in (0, 1):
            for statement in SQLITE_MIGRATIONS[version]:
                db.execute(statement)
        db.execute("INSERT INTO tether_schema (version, applied_at) VALUES (1, 0)")
    before = digest(path)
    with pytest.raises(SchemaVersionError, match=r"version 1, older.*never migrates") as info:
        await SQLiteStore(path, create=False).setup()
    assert (info.value.found, info.value.supported) == (1, SCHEMA_VERSION)
    assert digest(path) == before
    async with SQLiteStore(path):  # a program that writes migrates it
        pass
    async with SQLiteStore(path, create=False) as store:
        assert await store.count_pending() == 0


async def test_an_existing_store_opens_and_works(tmp_path: Path) -> None:
    path = tmp_path / "tether.db"
    await make_tether_store(path)
    before = digest(path)
    async with open_store(f"sqlite:///{path}", create=False) as store:
        [pending] = await store.list_pending()
        assert pending.execution_id == "ex"
    assert digest(path) == before  # opened, read and closed: the file is as it was
    async with SQLiteStore(path, create=False, synchronous="NORMAL") as store:
        entry = await store.claim("ex", "approved")  # create=False creates nothing; it still writes
        assert entry.kind == "resumed"
        assert await store.count_pending() == 0


# -- SQLite: tables tether did not create -------------------------------------------


@pytest.mark.parametrize("create", [True, False])
async def test_a_foreign_tether_executions_table_is_refused(tmp_path: Path, create: bool) -> None:
    path = tmp_path / "foreign.db"
    make_app_database(path, "tether_executions", "notes")
    before = digest(path)
    with pytest.raises(StoreCorrupted, match=r"not a tether store.*\(tether_executions\).*another file"):
        await SQLiteStore(path, create=create).setup()
    assert digest(path) == before
    assert journal_mode(path) == "delete"  # checked before the switch to WAL
    assert sorted(p.name for p in tmp_path.iterdir()) == ["foreign.db"]


async def test_an_application_database_takes_tethers_tables_beside_its_own(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    make_app_database(path, "notes", "orders")
    async with SQLiteStore(path) as store:
        await store.start_execution(NewExecution(execution_id="ex", runner="r", root_path="a"),
                                    owner="me", lease_seconds=60)
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT note FROM notes").fetchall() == [("mine",)]
        versions = [r[0] for r in db.execute("SELECT version FROM tether_schema ORDER BY version")]
    assert versions == list(range(1, SCHEMA_VERSION + 1))
    assert journal_mode(path) == "wal"


async def test_a_file_that_is_not_a_database_with_create_false(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"These are my notes, not a database.\n" * 200)
    before = digest(path)
    with pytest.raises(StoreCorrupted, match="not a usable SQLite database"):
        await SQLiteStore(path, create=False).setup()
    assert digest(path) == before


# -- Postgres -----------------------------------------------------------------------


def relations(dsn: str, schema: str) -> list[str]:
    rows = admin_sql(dsn, "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                          "WHERE n.nspname = $1 ORDER BY 1", schema)
    return [row[0] for row in rows]


def schema_exists(dsn: str, schema: str) -> bool:
    return bool(admin_sql(dsn, "SELECT 1 FROM pg_namespace WHERE nspname = $1", schema))


def with_password(dsn: str) -> str:
    """The same DSN with a password in it (the test server trusts local connections)."""
    return re.sub(r"://([^:/@]+)@", r"://\1:hunter2@", dsn, count=1)


async def test_postgres_missing_schema_is_not_created(postgres_dsn: str, pg_schema: str) -> None:
    dsn = with_password(postgres_dsn)
    assert "hunter2" in dsn
    for store in (PostgresStore(dsn, schema=pg_schema, create=False),
                  open_store(f"{dsn}?schema={pg_schema}", create=False)):
        with pytest.raises(StoreNotFound, match=rf"No tether store in the schema '{pg_schema}' of") as info:
            await store.setup()
        assert "***" in str(info.value) and "hunter2" not in str(info.value)
        await store.aclose()
    assert not await anyio.to_thread.run_sync(schema_exists, postgres_dsn, pg_schema)


async def test_postgres_schema_without_tether_tables_is_untouched(postgres_dsn: str, pg_schema: str) -> None:
    await anyio.to_thread.run_sync(admin_script, postgres_dsn,
                                   f'CREATE SCHEMA "{pg_schema}"; CREATE TABLE "{pg_schema}".notes (id int)')
    with pytest.raises(StoreNotFound, match="it has no tether tables"):
        await PostgresStore(postgres_dsn, schema=pg_schema, create=False).setup()
    assert await anyio.to_thread.run_sync(relations, postgres_dsn, pg_schema) == ["notes"]
    async with PostgresStore(postgres_dsn, schema=pg_schema) as store:  # an application's schema takes them
        assert await store.count_pending() == 0
    assert "tether_schema" in await anyio.to_thread.run_sync(relations, postgres_dsn, pg_schema)


@pytest.mark.parametrize("create", [True, False])
async def test_postgres_foreign_tether_executions_is_refused_and_untouched(
    postgres_dsn: str, pg_schema: str, create: bool
) -> None:
    await anyio.to_thread.run_sync(
        admin_script, postgres_dsn,
        f'CREATE SCHEMA "{pg_schema}"; CREATE TABLE "{pg_schema}".tether_executions (id text)',
    )
    with pytest.raises(StoreCorrupted, match=r"not a tether store.*\(tether_executions\)"):
        await PostgresStore(postgres_dsn, schema=pg_schema, create=create).setup()
    assert await anyio.to_thread.run_sync(relations, postgres_dsn, pg_schema) == ["tether_executions"]


async def test_postgres_older_schema_is_not_migrated(postgres_dsn: str, pg_schema: str) -> None:
    statements = [f'CREATE SCHEMA "{pg_schema}"', f'SET search_path TO "{pg_schema}"']
    statements += [s for version in (0, 1) for s in POSTGRES_MIGRATIONS[version]]
    statements += ["INSERT INTO tether_schema (version) VALUES (1)"]
    await anyio.to_thread.run_sync(admin_script, postgres_dsn, ";\n".join(statements))
    before = await anyio.to_thread.run_sync(relations, postgres_dsn, pg_schema)
    with pytest.raises(SchemaVersionError, match="older") as info:
        await PostgresStore(postgres_dsn, schema=pg_schema, create=False).setup()
    assert (info.value.found, info.value.supported) == (1, SCHEMA_VERSION)
    assert await anyio.to_thread.run_sync(relations, postgres_dsn, pg_schema) == before
    rows = await anyio.to_thread.run_sync(
        admin_sql, postgres_dsn, f'SELECT version FROM "{pg_schema}".tether_schema'
    )
    assert [row[0] for row in rows] == [1]


async def test_postgres_existing_store_opens_and_checks_clean(postgres_dsn: str, pg_schema: str) -> None:
    async with PostgresStore(postgres_dsn, schema=pg_schema) as store:
        started = await store.start_execution(
            NewExecution(execution_id="ex", runner="r", root_path="agent:a"), owner="me", lease_seconds=60
        )
        assert started.lease is not None
        await store.suspend(started.lease, [NewEntry(path="agent:a/tool:t", label="s", kind="suspended")],
                            NewInterrupt(path="agent:a/tool:t", reason="approval"))
    async with open_store(f"{postgres_dsn}?schema={pg_schema}", create=False) as store:
        assert [p.execution_id for p in await store.list_pending()] == ["ex"]
        assert await store.check() == []


async def test_postgres_check_reports_broken_invariants(postgres_dsn: str, pg_schema: str) -> None:
    async with PostgresStore(postgres_dsn, schema=pg_schema) as store:
        for name in ("gone", "odd"):
            started = await store.start_execution(
                NewExecution(execution_id=name, runner="r", root_path="agent:a"), owner="me", lease_seconds=60
            )
            assert started.lease is not None
            await store.append(started.lease, [NewEntry(path="agent:a", label="step")])
            await store.suspend(started.lease, [NewEntry(path="agent:a/tool:t", label="s", kind="suspended")],
                                NewInterrupt(path="agent:a/tool:t", reason="approval"))
        await anyio.to_thread.run_sync(admin_script, postgres_dsn, (
            f'DELETE FROM "{pg_schema}".tether_executions WHERE id = \'gone\';'
            f'UPDATE "{pg_schema}".tether_pending SET seq = 1 WHERE execution_id = \'odd\';'
            f'UPDATE "{pg_schema}".tether_executions SET next_seq = 2 WHERE id = \'odd\''
        ))
        assert await store.check() == [
            "execution 'gone' has no row in tether_executions, but its journal entries remain (2)",
            "execution 'gone' has no row in tether_executions, but its pending interrupts remain (1)",
            ("the pending interrupt of execution 'odd' at 'agent:a/tool:t' names seq 1, which is no "
             "'suspended' entry of its journal"),
            "execution 'odd' would number its next journal entry 2, but its journal already reaches 2",
        ]
        assert await store.get_execution("odd") is not None  # no damage: the store goes on
