"""A store URL per test, on SQLite and Postgres; the CLI on it under both backends; a paused refund chain when asked."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from tether.runtime.ops._cli import main
from tether.stores import open_store

from ._flows import refund

Tether = Callable[..., tuple[int, str, str]]


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ops.db'}"
    return f"{request.getfixturevalue('postgres_dsn')}?schema={request.getfixturevalue('pg_schema')}"


@pytest.fixture(params=["asyncio", "trio"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def tether(url: str, backend: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Tether:
    """``tether(*args)``: main() on this store and backend, the options after the command."""
    monkeypatch.setenv("COLUMNS", "400")  # string checks below need no wrapping
    monkeypatch.delenv("TETHER_STORE", raising=False)

    def run(*args: str) -> tuple[int, str, str]:
        code = main([*args, "--store", url, "--backend", backend])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


def start_paused(url: str, execution_id: str, amount: int = 50_000, note: str = "") -> None:
    """A refund chain run to its approval, in a run of its own (as another process would)."""
    async def main() -> None:
        async with open_store(url) as store:
            refund.store = store
            result = await refund.run({"amount": amount, "note": note}, execution_id=execution_id)
            assert result.status == "paused"

    anyio.run(main)
