"""Bad input gets a specific error that says what to do, and writes nothing."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING

import anyio
import pytest
from tether.stores import (
    SCHEMA_VERSION,
    ConfigurationError,
    NewEntry,
    NewExecution,
    NewInterrupt,
    PostgresStore,
    SchemaVersionError,
    SerializationError,
    SQLiteStore,
    Store,
    StoreCorrupted,
    StoreUnavailable,
    UsageError,
    open_store,
)

from tests._postgres import admin_sql, with_database

if TYPE_CHECKING:
    from pathlib import Path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def make_paused(store: Store) -> str:
    started = await store.start_execution(
        NewExecution(execution_id="ex", runner="r", root_path="agent:a"), owner="me", lease_seconds=60
    )
    assert started.lease is not None
    await store.suspend(started.lease, [NewEntry(path="agent:a/tool:t", label="s", kind="suspended")],
                        NewInterrupt(path="agent:a/tool:t", reason="approval"))
    return "ex"


# -- files and servers -----------------------------------------------------------


async def test_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"These are my notes, not a database.\n" * 200)
    before = digest(path)
    with pytest.raises(StoreCorrupted, match=r"not a usable SQLite database.*backup"):
        await SQLiteStore(path).setup()
    assert digest(path) == before


async def test_a_truncated_database(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    async with SQLiteStore(path) as store:
        lease = (await store.start_execution(
            NewExecution(execution_id="ex", runner="r", root_path="a"), owner="me", lease_seconds=60
        )).lease
        assert lease is not None
        await store.append(lease, [NewEntry(path="a", label=f"e{i}", payload="x" * 500) for i in range(200)])
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    before = digest(path)
    with pytest.raises(StoreCorrupted):
        async with SQLiteStore(path) as store:
            await store.read_journal("ex")
    assert digest(path) == before


async def test_a_database_from_a_newer_tether(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    async with SQLiteStore(path):
        pass
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO tether_schema (version, applied_at) VALUES (99, 0)")
    before = digest(path)
    with pytest.raises(SchemaVersionError, match=r"version 99.*Upgrade tether") as info:
        await SQLiteStore(path).setup()
    assert (info.value.found, info.value.supported) == (99, SCHEMA_VERSION)
    assert digest(path) == before


async def test_postgres_schema_from_a_newer_tether(postgres_dsn: str, pg_schema: str) -> None:
    async with PostgresStore(postgres_dsn, schema=pg_schema):
        pass
    await anyio.to_thread.run_sync(
        admin_sql, postgres_dsn, f"INSERT INTO {pg_schema}.tether_schema (version) VALUES (99)"
    )
    with pytest.raises(SchemaVersionError):
        await PostgresStore(postgres_dsn, schema=pg_schema).setup()


async def test_a_directory_that_does_not_exist(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailable, match="directory exists"):
        await SQLiteStore(tmp_path / "missing" / "app.db").setup()


async def test_a_dsn_that_does_not_answer() -> None:
    store = PostgresStore("postgresql://admin:hunter2@127.0.0.1:1/tether", connect_timeout=5)
    with pytest.raises(StoreUnavailable, match="server is running") as info:
        await store.setup()
    assert "127.0.0.1:1" in str(info.value) and "hunter2" not in str(info.value)
    assert "hunter2" not in repr(store)


async def test_a_database_that_does_not_exist(postgres_dsn: str) -> None:
    with pytest.raises(StoreUnavailable, match="does not exist"):
        await PostgresStore(with_database(postgres_dsn, "no_such_db_here")).setup()


# -- values --------------------------------------------------------------------


async def test_payloads_that_are_not_json_write_nothing(store: Store) -> None:
    await make_paused(store)
    lease = await store.acquire_lease("ex", owner="me", lease_seconds=60)
    journal = await store.read_journal("ex")
    nested: object = []
    for _ in range(100_000):
        nested = [nested]
    for bad in (float("nan"), float("inf")):
        with pytest.raises(SerializationError, match="not JSON"):
            await store.append(lease, [NewEntry(path="a", label="ok"), NewEntry(path="a", label="bad", payload=bad)])
    with pytest.raises(SerializationError):
        await store.claim("ex", object(), path="agent:a/tool:t")  # type: ignore[arg-type]
    with pytest.raises(SerializationError):
        await store.claim("ex", nested, path="agent:a/tool:t")  # type: ignore[arg-type]
    with pytest.raises(SerializationError):
        await store.put_idempotent(lease, "k", {1, 2})  # type: ignore[arg-type]
    with pytest.raises(SerializationError):
        await store.release_lease(lease, status="completed", result=b"bytes")  # type: ignore[arg-type]
    # Nothing was written and the pending interrupt was not consumed.
    assert await store.read_journal("ex") == journal
    assert await store.count_pending(execution_id="ex") == 1
    execution = await store.get_execution("ex")
    assert execution is not None and execution.status == "running"


async def test_a_suspension_whose_context_or_default_is_not_json_writes_nothing(store: Store) -> None:
    started = await store.start_execution(
        NewExecution(execution_id="ex", runner="r", root_path="agent:a"), owner="me", lease_seconds=60
    )
    assert started.lease is not None
    for bad in (NewInterrupt(path="agent:a/tool:t", reason="r", context={1, 2}),  # type: ignore[arg-type]
                NewInterrupt(path="agent:a/tool:t", reason="r", default=object())):  # type: ignore[arg-type]
        with pytest.raises(SerializationError, match="not JSON"):
            await store.suspend(started.lease, [NewEntry(path="agent:a", label="s", kind="suspended")], bad)
    assert await store.read_journal("ex") == []
    assert await store.count_pending(execution_id="ex") == 0


async def test_what_a_reader_gets_is_its_own(store: Store) -> None:
    # A database decodes each read afresh; a store must not hand out objects it keeps.
    await store.start_execution(
        NewExecution(execution_id="ex", runner="r", root_path="agent:a", input={"items": [1]}),
        owner="me", lease_seconds=60,
    )
    first = await store.get_execution("ex")
    assert first is not None and isinstance(first.input, dict)
    first.input["items"].append(2)
    again = await store.get_execution("ex")
    [listed] = await store.list_executions()
    assert again is not None and again.input == {"items": [1]}
    assert listed.input == {"items": [1]}


async def test_strings_that_look_like_sql_are_just_strings(store: Store) -> None:
    evil = "x'); DELETE FROM tether_pending; --"
    started = await store.start_execution(
        NewExecution(execution_id=evil, runner=evil, root_path=evil, input={evil: evil}),
        owner=evil, lease_seconds=60,
    )
    assert started.lease is not None
    await store.suspend(started.lease, [NewEntry(path=evil, label=evil, payload=evil)],
                        NewInterrupt(path=evil + "/%_", reason=evil, context=evil))
    assert [p.agent_path for p in await store.list_pending(path_prefix=evil)] == [evil + "/%_"]
    assert await store.count_pending(path_prefix="x'%") == 0
    resumed = await store.claim(evil, evil, path=evil + "/%_", owner=evil)
    assert resumed.payload["value"] == evil  # type: ignore[index, call-overload]


# -- misuse --------------------------------------------------------------------


def test_store_urls() -> None:
    assert isinstance(open_store("sqlite:///app.db"), SQLiteStore)
    assert open_store("sqlite:////tmp/x.db").path == "/tmp/x.db"  # type: ignore[attr-defined]
    assert open_store("sqlite:///a.db?synchronous=normal").synchronous == "NORMAL"  # type: ignore[attr-defined]
    assert isinstance(open_store("postgres://u@h/db"), PostgresStore)
    scoped = open_store("postgresql://u@h/db?sslmode=disable&schema=tenant_a")
    assert scoped.schema == "tenant_a"  # type: ignore[attr-defined]
    assert scoped.dsn == "postgresql://u@h/db?sslmode=disable"  # type: ignore[attr-defined]
    bounded = open_store("postgresql://u@h/db?command_timeout=2.5&sslmode=disable")
    assert (bounded.command_timeout, bounded.dsn) == (2.5, "postgresql://u@h/db?sslmode=disable")  # type: ignore[attr-defined]
    assert open_store("postgresql://u@h/db?command_timeout=none").command_timeout is None  # type: ignore[attr-defined]
    for bad in ("mysql://x/y", "sqlite://", "sqlite:///a.db?synchronous=OFF", "sqlite:///a.db?x=1", "app.db",
                "postgresql://u@h/db?command_timeout=soon", "postgresql://u@h/db?command_timeout=0"):
        with pytest.raises(ConfigurationError):
            open_store(bad)
    with pytest.raises(ConfigurationError):
        SQLiteStore("a.db", synchronous="OFF")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        PostgresStore("postgresql://h/db", schema="x; DROP")


async def test_a_closed_store_says_so(store: Store) -> None:
    await store.aclose()
    await store.aclose()
    with pytest.raises(UsageError, match="closed"):
        await store.list_pending()


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_script_that_never_closes_its_store_exits(
    kind: str, backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if kind == "sqlite":
        make = f"SQLiteStore({str(tmp_path / 'a.db')!r})"
    else:
        dsn, schema = request.getfixturevalue("postgres_dsn"), request.getfixturevalue("pg_schema")
        make = f"PostgresStore({dsn!r}, schema={schema!r})"
    script = textwrap.dedent(f"""
        import anyio
        from tether.stores import NewExecution, PostgresStore, SQLiteStore
        async def main():
            store = {make}
            await store.start_execution(NewExecution(execution_id="ex", runner="r", root_path="a"),
                                        owner="me", lease_seconds=60)
            print("written")
        anyio.run(main, backend={backend!r})
    """)
    done = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "written"

    async def check() -> None:
        store = SQLiteStore(tmp_path / "a.db") if kind == "sqlite" else PostgresStore(dsn, schema=schema)
        async with store:
            assert await store.get_execution("ex") is not None

    anyio.run(check, backend=backend)


async def test_megabyte_payloads_round_trip(store: Store) -> None:
    big = {"blob": "x" * 5_000_000, "items": list(range(100_000))}
    started = await store.start_execution(NewExecution(execution_id="big", runner="r", root_path="agent:a"),
                                          owner="me", lease_seconds=60)
    assert started.lease is not None
    pending = await store.suspend(started.lease, [NewEntry(path="agent:a", label="s", payload=big)],
                                  NewInterrupt(path="agent:a/tool:t", reason="look", context=big))
    assert pending.context == big
    await store.release_lease(started.lease, status="paused")
    decision = await store.claim("big", big, path="agent:a/tool:t")
    assert decision.payload["value"] == big  # type: ignore[index, call-overload]
    first = (await store.read_journal("big"))[0]
    assert first.payload == big


def test_an_expired_lease_has_no_seconds_left() -> None:
    from datetime import UTC, datetime, timedelta

    from tether.stores import LeaseHeld

    held = LeaseHeld("x", "proc-a", datetime.now(UTC) - timedelta(seconds=5))
    assert held.seconds_left == 0.0
