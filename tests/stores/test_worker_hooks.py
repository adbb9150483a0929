"""What a worker asks of any store: a slot to work in (`Store.worker_slot`), and notifications (`Store.listen`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import pytest
from tether.stores import ConfigurationError, NewExecution, PostgresStore, SQLiteStore

from tests.conftest import make_store

if TYPE_CHECKING:
    from pathlib import Path

    from tether.stores import Listener


def test_one_worker_per_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with SQLiteStore(path).worker_slot():
        with pytest.raises(ConfigurationError) as refused, SQLiteStore(path).worker_slot():
            pass
        assert str(refused.value) == (
            f"Another tether worker already works on this SQLite store ({path}.worker.lock is locked). "
            f"SQLite supports one worker process at a time; use Postgres for several."
        )
        with SQLiteStore(tmp_path / "other.db").worker_slot():  # another file, another slot
            pass
    with SQLiteStore(path).worker_slot():  # given back when the block exited
        pass


@pytest.mark.parametrize("kind", ["memory", "postgres"])
def test_other_stores_admit_any_number_of_workers(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    store = make_store(kind, tmp_path, request)
    with store.worker_slot(), store.worker_slot():
        pass


@pytest.mark.parametrize("kind", ["memory", "sqlite", "sqlite-normal"])
async def test_stores_that_cannot_notify_say_so(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    async with make_store(kind, tmp_path, request) as store:
        assert await store.listen(lambda: None) is None


async def test_postgres_notifies_a_listener_of_new_work(postgres_dsn: str, pg_schema: str) -> None:
    async with PostgresStore(postgres_dsn, schema=pg_schema) as store:
        woken = anyio.Event()
        listener: Listener | None = await store.listen(woken.set)
        assert listener is not None and not listener.closed
        try:
            await store.enqueue_execution(NewExecution(execution_id="ex", runner="r", root_path="a"))
            with anyio.fail_after(10):
                await woken.wait()
        finally:
            await listener.aclose()
        assert listener.closed
