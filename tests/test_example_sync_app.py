"""examples/sync_app.py runs as a user runs it: a threaded WSGI server, real HTTP requests, a real store.

Its self-test runs on SQLite and Postgres, with the runtime's loop on asyncio and
on trio: four runs of the script as ``__main__``, one after the other in one
Python process (``python -W error``), so the four share one start-up.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from tether.stores import open_store

from tests._postgres import admin_sql
from tests._run_each import run_each

if TYPE_CHECKING:
    from collections.abc import Iterator

EXAMPLE = Path(__file__).parent.parent / "examples" / "sync_app.py"
RUNS = [(kind, backend) for kind in ("sqlite", "postgres") for backend in ("asyncio", "trio")]

@pytest.fixture
def urls(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[str]]:
    """A fresh store for each of RUNS: a SQLite file, or a Postgres schema of its own (dropped after)."""
    dsn: str = request.getfixturevalue("postgres_dsn")
    schemas = [f"t_{uuid.uuid4().hex[:12]}" for _ in RUNS]
    yield [f"sqlite:///{tmp_path / f'app-{n}.db'}" if kind == "sqlite" else
           f"{dsn}{'&' if '?' in dsn else '?'}schema={schemas[n]}" for n, (kind, _) in enumerate(RUNS)]
    for schema in schemas:
        admin_sql(dsn, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_the_sync_app_selftest(urls: list[str]) -> None:
    runs = [["--selftest", "--store", url, "--backend", backend] for url, (_, backend) in zip(urls, RUNS, strict=True)]
    results, stderr = run_each(EXAMPLE, runs, python_options=("-W", "error"))
    for (kind, backend), url, (said, code) in zip(RUNS, urls, results, strict=True):
        where = f"{kind} on {backend}"
        assert code == "0", f"{where}: exited {code}\n{said}{stderr}"
        assert "BAD" not in said, f"{where}:\n{said}"
        assert "3 won, 3 got 409" in said, f"{where}:\n{said}"
        assert said.rstrip().endswith("all good"), f"{where}:\n{said}"

        async def read(url: str = url) -> tuple[list[Any], list[Any]]:
            async with open_store(url) as store:
                return await store.list_executions(limit=100), await store.list_pending()

        executions, pending = anyio.run(read, backend=backend)
        assert pending == [], where
        paid = {e.execution_id: (e.status, e.result["paid"], e.result["approver"]) for e in executions}
        assert paid.keys() == {"refund-1", "refund-2", "refund-3", "refund-4"}, where
        assert paid["refund-1"] == ("completed", 250, "auto"), where
        for order, amount in (("2", 5000), ("3", 12_000), ("4", 40_000)):
            status, paid_out, approver = paid[f"refund-{order}"]
            assert (status, paid_out) == ("completed", amount), where
            assert approver in ("alice", "bob"), where
