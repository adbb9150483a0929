"""examples/sync_app.py runs as a user runs it: a threaded WSGI server, real HTTP requests, a real store."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from tether.stores import open_store

from tests._postgres import admin_sql

if TYPE_CHECKING:
    from collections.abc import Iterator

EXAMPLE = Path(__file__).parent.parent / "examples" / "sync_app.py"


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'app.db'}"
        return
    dsn: str = request.getfixturevalue("postgres_dsn")
    schema = f"t_{uuid.uuid4().hex[:12]}"
    yield f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"
    admin_sql(dsn, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_sync_app_selftest(url: str, backend: str) -> None:
    done = subprocess.run([sys.executable, "-W", "error", str(EXAMPLE), "--selftest", "--store", url,
                           "--backend", backend], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "BAD" not in done.stdout
    assert "3 won, 3 got 409" in done.stdout
    assert done.stdout.rstrip().endswith("all good")

    async def read() -> tuple[list[Any], list[Any]]:
        async with open_store(url) as store:
            return await store.list_executions(limit=100), await store.list_pending()

    executions, pending = anyio.run(read, backend=backend)
    assert pending == []
    paid = {e.execution_id: (e.status, e.result["paid"], e.result["approver"]) for e in executions}
    assert paid.keys() == {"refund-1", "refund-2", "refund-3", "refund-4"}
    assert paid["refund-1"] == ("completed", 250, "auto")
    for order, amount in (("2", 5000), ("3", 12_000), ("4", 40_000)):
        status, paid_out, approver = paid[f"refund-{order}"]
        assert (status, paid_out) == ("completed", amount)
        assert approver in ("alice", "bob")
