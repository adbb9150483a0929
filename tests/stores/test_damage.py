"""A damaged SQLite file: what finds the damage raises StoreCorrupted, and nothing is written after it.

Each test damages a copy of one real store holding a few hundred executions, the
ways a disk or a careless tool does: pages in the middle overwritten with
garbage, bytes changed inside stored JSON text, invalid UTF-8 in a text column.
"""

from __future__ import annotations

import hashlib
import random
import shutil
import sqlite3
from typing import TYPE_CHECKING

import anyio
import pytest
from tether.stores import (
    NewEntry,
    NewExecution,
    NewInterrupt,
    SQLiteStore,
    StoreCorrupted,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from pathlib import Path

EXECUTIONS = 300
PAGE = 4096


async def fill(path: Path) -> None:
    async with SQLiteStore(path, synchronous="NORMAL") as store:
        for i in range(EXECUTIONS):
            started = await store.start_execution(
                NewExecution(execution_id=f"ex{i:04d}", runner="r", root_path="agent:a",
                             input={"n": i, "text": f"input-of-ex{i:04d}", "pad": "y" * 50}),
                owner="me", lease_seconds=600,
            )
            lease = started.lease
            assert lease is not None
            await store.append(lease, [
                NewEntry(path="agent:a", label=f"step{j}",
                         payload={"note": f"payload-of-ex{i:04d}-{j}", "pad": "x" * 200})
                for j in range(3)
            ])
            if i % 3 == 0:
                await store.suspend(lease, [NewEntry(path="agent:a/tool:t", label="s", kind="suspended")],
                                    NewInterrupt(path="agent:a/tool:t", reason="approval", context={"i": i}))
            await store.release_lease(lease, status="paused" if i % 3 == 0 else None)
    with sqlite3.connect(path) as db:  # everything into the main file, where the damage goes
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("damage") / "pristine.db"
    anyio.run(fill, path)
    return path


@pytest.fixture
def copy(pristine: Path, tmp_path: Path) -> Path:
    path = tmp_path / "app.db"
    shutil.copyfile(pristine, path)
    return path


def overwrite(path: Path, offset: int, data: bytes) -> None:
    with path.open("r+b") as file:
        file.seek(offset)
        file.write(data)


def replace_inside(path: Path, marker: bytes, at: int, data: bytes) -> None:
    """Overwrite bytes of the one stored text that contains ``marker``, in place."""
    content = path.read_bytes()
    assert content.count(marker) == 1
    overwrite(path, content.index(marker) + at, data)


def file_state(path: Path) -> tuple[str, str]:
    """The database file and its WAL, where every write would go."""
    wal = path.with_name(path.name + "-wal")
    return (hashlib.sha256(path.read_bytes()).hexdigest(),
            hashlib.sha256(wal.read_bytes()).hexdigest() if wal.exists() else "")


def operations(store: SQLiteStore) -> dict[str, Callable[[], Awaitable[object]]]:
    """A read or a write of each kind an operator or a worker makes."""
    return {
        "list_executions": lambda: store.list_executions(limit=1000),
        "list_pending": lambda: store.list_pending(limit=1000),
        "count_pending": lambda: store.count_pending(),
        "get_execution": lambda: store.get_execution("ex0150"),
        "read_journal": lambda: store.read_journal("ex0150"),
        "start_execution": lambda: store.start_execution(
            NewExecution(execution_id="new", runner="r", root_path="agent:a"), owner="me", lease_seconds=60),
        "claim": lambda: store.claim("ex0150", "approved"),
        "acquire_lease": lambda: store.acquire_lease("ex0151", owner="me", lease_seconds=60),
        "take_work": lambda: store.take_work(owner="me", lease_seconds=60, limit=10),
        "delete_execution": lambda: store.delete_execution("ex0152"),
    }


async def refuses_everything_after(store: SQLiteStore, path: Path, first: str) -> StoreCorrupted:
    """Run ``first``, which must find the damage; then every operation is refused and nothing is written."""
    ops = operations(store)
    with pytest.raises(StoreCorrupted) as found:
        await ops.pop(first)()
    before = file_state(path)
    for name, op in ops.items():
        with pytest.raises(StoreCorrupted, match="found damage earlier") as refused:
            await op()
        assert str(found.value) in str(refused.value), name
    assert file_state(path) == before
    return found.value


async def test_pages_overwritten_in_the_middle(copy: Path) -> None:
    pages = copy.stat().st_size // PAGE
    assert pages > 60
    overwrite(copy, pages // 3 * PAGE, random.Random(7).randbytes(pages // 3 * PAGE))
    async with SQLiteStore(copy) as store:
        await store.setup()  # the header and the schema are intact: opening finds nothing
        found = await refuses_everything_after(store, copy, "list_executions")
        assert "not a usable SQLite database" in str(found) and "malformed" in str(found)
        before = file_state(copy)
        problems = await store.check()  # runs on a store that found damage, and writes nothing
        assert file_state(copy) == before
    assert problems and all(isinstance(line, str) for line in problems)
    assert any(line.startswith("SQLite integrity_check") for line in problems)


@pytest.mark.parametrize("synchronous", ["FULL", "NORMAL"])
async def test_bytes_changed_inside_stored_json(copy: Path, synchronous: str) -> None:
    # A control character where the string's opening quote was: the row is intact, its JSON is not.
    replace_inside(copy, b'"payload-of-ex0150-1"', 0, b"\x01")
    async with SQLiteStore(copy, synchronous=synchronous) as store:  # type: ignore[arg-type]
        assert len(await store.list_executions(limit=1000)) == EXECUTIONS  # nothing there reads that entry
        found = await refuses_everything_after(store, copy, "read_journal")
        assert "JSON" in str(found)
        problems = await store.check()
    assert problems == [
        "tether_journal row ('ex0150', '2'): payload is not JSON (Expecting value: line 1 column 9 (char 8))"
    ]


async def test_invalid_utf8_in_a_text_column(copy: Path) -> None:
    replace_inside(copy, b'"input-of-ex0150"', 1, b"\xff\xfe")
    async with SQLiteStore(copy) as store:
        found = await refuses_everything_after(store, copy, "get_execution")
        assert "not UTF-8" in str(found)
        assert "UTF-8" in str(found.__cause__)  # sqlite3's OperationalError, once StoreUnavailable
    async with SQLiteStore(copy) as store:  # a listing finds it the same way
        found = await refuses_everything_after(store, copy, "list_executions")
        problems = await store.check()
    assert problems == ["tether_executions row ('ex0150'): input is not UTF-8 text"]


@pytest.mark.parametrize("synchronous", ["FULL", "NORMAL"])
async def test_a_write_that_reads_damage_raises_it_and_writes_nothing(copy: Path, synchronous: str) -> None:
    replace_inside(copy, b'"input-of-ex0150"', 1, b"\xff\xfe")
    async with SQLiteStore(copy, synchronous=synchronous) as store:  # type: ignore[arg-type]
        await store.count_pending()
        before = file_state(copy)
        with pytest.raises(StoreCorrupted, match="not UTF-8"):  # it returns the execution it found
            await store.start_execution(NewExecution(execution_id="ex0150", runner="r", root_path="agent:a"),
                                        owner="me", lease_seconds=60)
        with pytest.raises(StoreCorrupted, match="found damage earlier"):
            await store.start_execution(NewExecution(execution_id="new", runner="r", root_path="agent:a"),
                                        owner="me", lease_seconds=60)
        assert file_state(copy) == before


async def test_a_new_store_opens_the_file_again_once_it_is_repaired(copy: Path) -> None:
    original = copy.read_bytes()
    replace_inside(copy, b'"payload-of-ex0150-1"', 0, b"\x01")
    async with SQLiteStore(copy) as damaged:
        with pytest.raises(StoreCorrupted):
            await damaged.read_journal("ex0150")
        copy.write_bytes(original)  # restored from a backup
        with pytest.raises(StoreCorrupted, match="found damage earlier"):
            await damaged.read_journal("ex0150")  # this store stays refused
        async with SQLiteStore(copy) as repaired:
            assert len(await repaired.read_journal("ex0150")) == 4  # three steps and the suspension
            assert await repaired.check() == []


async def test_a_sound_store_checks_clean(copy: Path) -> None:
    async with SQLiteStore(copy) as store:
        assert await store.check() == []
        assert await store.count_pending() == EXECUTIONS // 3


async def test_check_reports_broken_invariants_without_refusing_the_store(copy: Path) -> None:
    with sqlite3.connect(copy) as db:
        db.execute("DELETE FROM tether_executions WHERE id = 'ex0003'")  # its journal and pending row stay
        db.execute("UPDATE tether_pending SET seq = 1 WHERE execution_id = 'ex0006'")  # seq 1 is a step
    async with SQLiteStore(copy) as store:
        problems = await store.check()
        assert problems == [
            "execution 'ex0003' has no row in tether_executions, but its journal entries remain (4)",
            "execution 'ex0003' has no row in tether_executions, but its pending interrupts remain (1)",
            ("the pending interrupt of execution 'ex0006' at 'agent:a/tool:t' names seq 1, which is no "
             "'suspended' entry of its journal"),
        ]
        # Rows that break tether's invariants are no damage to the file: the store goes on.
        assert await store.get_execution("ex0006") is not None
        assert await store.delete_execution("ex0006")


async def test_many_problems_are_counted_not_all_listed(copy: Path) -> None:
    with sqlite3.connect(copy) as db:
        db.execute("DELETE FROM tether_executions WHERE id < 'ex0100'")
    async with SQLiteStore(copy) as store:
        problems = await store.check()
    journal = [line for line in problems if "its journal entries remain" in line]
    assert len(journal) == 10
    assert problems[10] == "... and 90 more like the line above"
    assert problems[21] == "... and 24 more like the line above"  # the 34 pending interrupts among them
    assert len(problems) == 22


async def test_a_row_that_is_not_what_tether_writes(copy: Path) -> None:
    with sqlite3.connect(copy) as db:  # a changed byte that leaves valid UTF-8: 'paused' -> 'paused!'
        db.execute("UPDATE tether_executions SET status = 'paused!' WHERE id = 'ex0150'")
    async with SQLiteStore(copy) as store:
        found = await refuses_everything_after(store, copy, "get_execution")
        assert "does not hold what tether writes" in str(found)
        assert await store.check() == ["tether_executions row ('ex0150'): status 'paused!' is no execution status"]
