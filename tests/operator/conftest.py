"""A store URL per test, on SQLite and Postgres, with a paused refund chain in it when asked."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from tether.stores import open_store

from ._flows import refund


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ops.db'}"
    return f"{request.getfixturevalue('postgres_dsn')}?schema={request.getfixturevalue('pg_schema')}"


def start_paused(url: str, execution_id: str, amount: int = 50_000, note: str = "") -> None:
    """A refund chain run to its approval, in a run of its own (as another process would)."""
    async def main() -> None:
        async with open_store(url) as store:
            refund.store = store
            result = await refund.run({"amount": amount, "note": note}, execution_id=execution_id)
            assert result.status == "paused"

    anyio.run(main)
