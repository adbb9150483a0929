from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pytest
from tether.stores import MemoryStore, PostgresStore, SQLiteStore, Store

from tests._postgres import test_database

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator
    from pathlib import Path


@pytest.fixture(params=[pytest.param("asyncio", id="asyncio"), pytest.param("trio", id="trio")])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """A database of this test run's own, dropped at the end."""
    with test_database() as dsn:
        yield dsn


@pytest.fixture(scope="session")
def tether_postgres_dsn(postgres_dsn: str) -> str:
    """The testing kit's Postgres cases use this run's database (a pgserver where none answers)."""
    return postgres_dsn


@pytest.fixture
def pg_schema() -> str:
    """A fresh schema per test, so tests never see each other's rows."""
    return f"t_{uuid.uuid4().hex[:12]}"


STORE_KINDS = ["memory", "sqlite", "postgres"]


def make_store(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    if kind == "memory":
        return MemoryStore()
    if kind == "sqlite":
        return SQLiteStore(tmp_path / "tether.db")
    if kind == "sqlite-normal":  # its uncontended writes commit on the loop's thread
        return SQLiteStore(tmp_path / "tether.db", synchronous="NORMAL")
    dsn = request.getfixturevalue("postgres_dsn")
    return PostgresStore(dsn, schema=request.getfixturevalue("pg_schema"))


@pytest.fixture(params=STORE_KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    async with make_store(request.param, tmp_path, request) as opened:
        yield opened


@pytest.fixture(params=["sqlite", "postgres"])
async def db_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """A store backed by a real database (the memory store has no driver to bridge)."""
    async with make_store(request.param, tmp_path, request) as opened:
        yield opened
