"""Database faults under a running execution: connections killed by the server, a full disk,
a read-only database.

The run either rides the fault out or stops with a clear error; once the fault
clears, recovery finishes it with nothing lost and nothing done twice.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from tether.actors import Chain
from tether.runtime import LeaseHeld, Resume, RunResult, interrupt
from tether.stores import PostgresStore, SQLiteStore, StoreError, StoreUnavailable

from tests._postgres import admin_sql

RUNS: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _clean() -> None:
    RUNS.clear()


def first(state: dict[str, Any]) -> dict[str, Any]:
    """A step that counts its runs: one journaled before a fault must not run again."""
    RUNS["first"] += 1
    return {"first": True}


async def recover(chain: Chain, execution_id: str) -> RunResult:
    while True:
        try:
            return await chain.resume(execution_id)
        except LeaseHeld as held:  # the stopped run's lease runs out first
            await anyio.sleep(held.seconds_left + 0.05)


async def test_connections_killed_by_the_server_mid_run(postgres_dsn: str, pg_schema: str) -> None:
    inside, go = anyio.Event(), anyio.Event()

    async def middle(state: dict[str, Any]) -> dict[str, Any]:
        RUNS["middle"] += 1
        inside.set()
        await go.wait()
        return {"middle": True}

    def last(state: dict[str, Any]) -> dict[str, Any]:
        RUNS["last"] += 1
        return {"last": True}

    async with PostgresStore(postgres_dsn, schema=pg_schema) as store:
        chain = Chain("killed", [first, middle, last], store=store, lease_seconds=1.0)
        outcome: list[Any] = []

        async def run() -> None:
            try:
                outcome.append(await chain.run({}, execution_id="k-1"))
            except StoreError as exc:  # stopped with a clear error: acceptable, recovered below
                outcome.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await inside.wait()
            # Every connection of this database but the admin's own, mid-run.
            await anyio.to_thread.run_sync(
                admin_sql, postgres_dsn,
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()",
            )
            go.set()
        result = outcome[0] if isinstance(outcome[0], RunResult) else await recover(chain, "k-1")
    assert result.status == "completed"
    assert result.output == {"first": True, "middle": True, "last": True}
    assert RUNS["first"] == 1 and RUNS["last"] == 1  # finished steps never ran again


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs (root only: the test fails, clearly, where it cannot mount one)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.fail(f"cannot mount a small tmpfs here ({done.stderr.strip()}); this test needs root")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)  # -l: a thread may still hold a file


async def test_a_full_disk_stops_the_run_and_loses_nothing(tiny_disk: Path) -> None:
    def small(state: dict[str, Any]) -> dict[str, Any]:
        RUNS["small"] += 1
        return {"small": True}

    def big(state: dict[str, Any]) -> dict[str, Any]:
        RUNS["big"] += 1
        return {"big": "x" * 300_000}  # more than the disk has left

    filler = tiny_disk / "filler"
    db = tiny_disk / "app.db"
    store = SQLiteStore(db)
    chain = Chain("full", [small, big], store=store, lease_seconds=1.0)
    async with store:
        await store.setup()
        filler.write_bytes(b"\0" * (os.statvfs(tiny_disk).f_bavail * os.statvfs(tiny_disk).f_frsize - 200_000))
        with pytest.raises(StoreError, match=r"disk is full"):
            await chain.run({}, execution_id="d-1")
    filler.unlink()  # the fault clears
    with sqlite3.connect(db) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    async with SQLiteStore(db) as store:
        chain.store = store
        result = await recover(chain, "d-1")
    assert result.status == "completed"
    assert result.output == {"small": True, "big": "x" * 300_000}
    assert RUNS["small"] == 1  # journaled before the disk filled: not run again
    with contextlib.suppress(OSError):
        db.unlink()


def remount(mount: Path, mode: str) -> None:
    done = subprocess.run(
        ["mount", "-o", f"remount,{mode}", str(mount)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


async def test_a_read_only_database_refuses_the_resume_and_consumes_nothing(tiny_disk: Path) -> None:
    # The OS checks a file's writability when it is opened, so the fault meets the
    # next process that opens the store: here, the one that comes to resume.
    def gate(state: dict[str, Any]) -> dict[str, Any]:
        return {"approved": interrupt("approval", {}).approved}

    db = tiny_disk / "app.db"
    chain = Chain("ro", [first, gate], store=SQLiteStore(db))
    async with chain.store:
        assert (await chain.run({}, execution_id="ro-1")).status == "paused"
    before = db.read_bytes()

    remount(tiny_disk, "ro")  # the fault: a read-only mount, which binds root too
    chain.store = SQLiteStore(db)
    with pytest.raises(StoreUnavailable, match=r"read-only .* make it writable"):
        await chain.resume("ro-1", Resume(approved=True))
    await chain.store.aclose()
    assert db.read_bytes() == before

    remount(tiny_disk, "rw")  # the fault clears
    async with SQLiteStore(db) as store:
        chain.store = store
        assert [p.agent_path for p in await store.list_pending()] == ["chain:ro/node:gate"]
        result = await chain.resume("ro-1", Resume(approved=True))
    assert result.status == "completed"
    assert result.output == {"first": True, "approved": True}
    assert RUNS["first"] == 1


# A directory that goes away under an open store: SQLite keeps writing to the files it
# holds open, so without a check every later step would land where no process finds it.

async def test_a_directory_moved_away_refuses_writes_until_it_is_back(tmp_path: Path) -> None:
    inside, go = anyio.Event(), anyio.Event()

    async def middle(state: dict[str, Any]) -> dict[str, Any]:
        RUNS["middle"] += 1
        if RUNS["middle"] == 1:
            inside.set()
            await go.wait()
        return {"middle": True}

    def gate(state: dict[str, Any]) -> dict[str, Any]:
        return {"approved": interrupt("approval", {}).approved}

    data, away = tmp_path / "data", tmp_path / "away"
    data.mkdir()
    async with SQLiteStore(data / "app.db") as store:
        chain = Chain("moved", [first, middle, gate], store=store, lease_seconds=1.0)
        async with anyio.create_task_group() as tg:
            async def run() -> None:
                with pytest.raises(StoreUnavailable, match=r"no longer at that path .* nothing was written"):
                    await chain.run({}, execution_id="m-1")

            tg.start_soon(run)
            await inside.wait()
            data.rename(away)  # the fault, mid-run: the next boundary must not be acknowledged
            go.set()
        with pytest.raises(StoreUnavailable, match=r"no longer at that path"):
            await chain.run({}, execution_id="m-2")

        away.rename(data)  # the fault clears: the same store writes again
        paused = await recover(chain, "m-1")
        assert paused.status == "paused"
        assert [p.agent_path for p in await store.list_pending()] == ["chain:moved/node:gate"]
        assert (await store.get_execution("m-2")) is None  # refused, so never created
        data.rename(away)
        with pytest.raises(StoreUnavailable, match=r"no longer at that path"):
            await chain.resume("m-1", Resume(approved=True))
        away.rename(data)
        assert [p.agent_path for p in await store.list_pending()] == ["chain:moved/node:gate"]
        result = await chain.resume("m-1", Resume(approved=True))
    assert result.status == "completed"
    assert result.output == {"first": True, "middle": True, "approved": True}
    assert RUNS["first"] == 1  # journaled before the fault: not run again
    assert RUNS["middle"] == 2  # its boundary was refused, so it ran again on recovery


async def test_a_deleted_directory_or_a_replaced_file_is_never_written_through(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    async with SQLiteStore(data / "app.db") as store:
        chain = Chain("deleted", [lambda state: {"done": True}], store=store)
        assert (await chain.run({}, execution_id="d-1")).status == "completed"
        for path in data.iterdir():
            path.unlink()
        data.rmdir()
        with pytest.raises(StoreUnavailable, match=r"no longer at that path"):
            await chain.run({}, execution_id="d-2")
        # Another process makes a new store at the same path: still not the file this one holds.
        data.mkdir()
        async with SQLiteStore(data / "app.db") as other:
            assert await other.get_execution("d-1") is None
        with pytest.raises(StoreUnavailable, match=r"no longer at that path"):
            await chain.run({}, execution_id="d-2")
    async with SQLiteStore(data / "app.db") as store:  # a store opened on what is there now works
        chain.store = store
        assert (await chain.run({}, execution_id="d-2")).status == "completed"


async def test_an_unmounted_directory_refuses_writes_until_it_is_mounted_again(tmp_path: Path) -> None:
    source, mount = tmp_path / "volume", tmp_path / "mnt"
    source.mkdir()
    mount.mkdir()

    def run_mount(*args: str) -> None:
        done = subprocess.run(["mount", *args], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            pytest.fail(f"cannot bind-mount here ({done.stderr.strip()}); this test needs root")

    def gate(state: dict[str, Any]) -> dict[str, Any]:
        return {"approved": interrupt("approval", {}).approved}

    run_mount("--bind", str(source), str(mount))
    try:
        async with SQLiteStore(mount / "app.db") as store:
            chain = Chain("unmounted", [gate], store=store)
            assert (await chain.run({}, execution_id="u-1")).status == "paused"
            subprocess.run(["umount", "-l", str(mount)], check=True)  # -l: the store holds its files open
            with pytest.raises(StoreUnavailable, match=r"no longer at that path"):
                await chain.resume("u-1", Resume(approved=True))
            run_mount("--bind", str(source), str(mount))  # the volume is back, with the very same file
            result = await chain.resume("u-1", Resume(approved=True))
        assert result.status == "completed"
        assert result.output == {"approved": True}
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
