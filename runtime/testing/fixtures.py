"""The fixtures of tether's pytest plugin (see `tether.runtime.testing.plugin` to enable them).

- ``tether_store``: a fresh store per test, once per kind: ``memory``, ``sqlite``
  (a file in the test's temporary directory) and ``postgres`` (a schema of its
  own, dropped afterwards). Request ``anyio_backend`` parametrized over
  asyncio and trio, and one test body runs six ways.
- ``tether_clock``: an installed `Clock`.
- ``tether_effects``: an open `Effects` recorder.
- ``tether_postgres_dsn`` (session): the server ``tether_store`` uses, from
  ``TETHER_TEST_POSTGRES_DSN`` (set it empty for none), else
  ``postgresql://postgres@127.0.0.1:5432/postgres`` if something listens there, else None (the ``postgres`` cases then skip, or
  fail with ``tether_postgres = "required"``). Override it in a conftest.py to
  bring your own server.
"""

from __future__ import annotations

import os
import socket
import uuid
from typing import TYPE_CHECKING

import pytest
from tether.runtime._core import hooks
from tether.stores import MemoryStore, PostgresStore, SQLiteStore

from ._effects import Effects
from ._time import Clock

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator
    from pathlib import Path

    from tether.stores import Store

LOCAL = "postgresql://postgres@127.0.0.1:5432/postgres"
_NO_SERVER = (
    "no Postgres server for tether_store[postgres]: set TETHER_TEST_POSTGRES_DSN=postgresql://user@host/db "
    "or start one on 127.0.0.1:5432"
)
_found: dict[str, str | None] = {}


def _postgres_dsn() -> str | None:
    """The configured server (an empty value: none), else the local one if it answers; looked up once."""
    configured = os.environ.get("TETHER_TEST_POSTGRES_DSN")
    if configured is not None:
        return configured or None
    if "local" not in _found:
        try:
            socket.create_connection(("127.0.0.1", 5432), timeout=0.5).close()
            _found["local"] = LOCAL
        except OSError:
            _found["local"] = None
    return _found["local"]


def pytest_report_header(config: pytest.Config) -> str:
    """Say at the top of the run which Postgres the postgres cases use, or why they skip."""
    dsn = _postgres_dsn()
    if dsn is None:
        return f"tether: {_NO_SERVER}"
    return f"tether: tether_store[postgres] uses {dsn} (unless a conftest overrides tether_postgres_dsn)"


@pytest.fixture(scope="session")
def tether_postgres_dsn() -> str | None:
    """The Postgres server behind ``tether_store[postgres]``, or None where there is none."""
    return _postgres_dsn()


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def tether_store(
    request: pytest.FixtureRequest, anyio_backend: object, tmp_path: Path, tether_postgres_dsn: str | None
) -> AsyncIterator[Store]:
    """A fresh, open store: memory, a SQLite file, or a Postgres schema of its own."""
    store: Store
    if request.param == "memory":
        store = MemoryStore()
    elif request.param == "sqlite":
        store = SQLiteStore(tmp_path / "tether.db")
    else:
        if tether_postgres_dsn is None:
            if request.config.getini("tether_postgres") == "required":
                pytest.fail(_NO_SERVER + " (tether_postgres = 'required')")
            pytest.skip(_NO_SERVER)
        store = PostgresStore(tether_postgres_dsn, schema=f"tether_test_{uuid.uuid4().hex[:12]}", max_size=4)
    try:
        async with store:
            await store.setup()
            yield store
    finally:
        if isinstance(store, PostgresStore):
            await PostgresStore(store.dsn, schema=store.schema).drop_schema()


@pytest.fixture
def tether_clock() -> Iterator[Clock]:
    """A `Clock` that timers and deadlines read for the duration of the test."""
    with Clock() as clock:
        yield clock


@pytest.fixture
def tether_effects() -> Iterator[Effects]:
    """An `Effects` recorder open for the duration of the test."""
    with Effects() as effects:
        yield effects


@pytest.fixture(autouse=True)
def _tether_forget_dead_runs() -> Iterator[None]:
    # A crash a test left unrecovered must not hand its lease to a later test's run.
    yield
    hooks.installed().heirs.clear()
