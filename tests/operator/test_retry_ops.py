"""Retry a failed execution from its last good boundary: the Python API, ``tether retry``, the HTTP API."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import anyio
import pytest
from tether.runtime import Executions, ExecutionWorker, NotFailed
from tether.runtime.ops._cli import main
from tether.stores import ExecutionNotFound, open_store

from ._flows import flaky, retrying
from .test_http import serving

if TYPE_CHECKING:
    from pathlib import Path

    from tether.stores import Store


async def failed_run(store: Store, execution_id: str, broken: Path) -> None:
    broken.touch()
    flaky.store = store
    result = await flaky.run({"broken_while": str(broken)}, execution_id=execution_id)
    assert (result.status, result.error) == ("failed", "RuntimeError: the ledger is down")


async def test_a_retry_continues_from_the_last_good_boundary(db_store: Store, tmp_path: Path) -> None:
    broken = tmp_path / "ledger-down"
    await failed_run(db_store, "r-1", broken)
    broken.unlink()  # fixed
    done = await flaky.retry("r-1", by="test:dana")
    assert (done.status, done.output) == ("completed", {"broken_while": str(broken), "valid": True, "booked": True})
    journal = await db_store.read_journal("r-1")
    labels = [e.label for e in journal]
    assert labels.count("node:validate") == 1  # the boundary before the failure is not run again
    retried = next(e for e in journal if e.label == "retried")
    assert retried.payload == {"by": "test:dana"}
    with pytest.raises(NotFailed, match="it completed"):
        await flaky.retry("r-1")
    with pytest.raises(ExecutionNotFound):
        await flaky.retry("nobody")
    assert await db_store.read_journal("r-1") == journal


async def test_a_worker_carries_a_retry_on(db_store: Store, tmp_path: Path) -> None:
    broken = tmp_path / "ledger-down"
    await failed_run(db_store, "r-2", broken)
    broken.unlink()
    assert (await Executions(db_store).retry("r-2")).status == "running"
    async with ExecutionWorker(db_store, [flaky]) as worker:
        await worker.serve(until_idle=True)
    assert (await db_store.get_execution("r-2")).status == "completed"  # type: ignore[union-attr]


def test_tether_retry_here_and_for_a_worker(url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "ledger-down"

    async def fail(execution_id: str) -> None:
        async with open_store(url) as store:
            await failed_run(store, execution_id, broken)

    anyio.run(fail, "r-3")
    code = main(["--store", url, "retry", "r-3", "--app", "tests.operator._flows:retrying", "--json"])
    assert json.loads(capsys.readouterr().out)["status"] == "failed"  # still broken: it fails again
    broken.unlink()
    code = main(["--store", url, "retry", "r-3", "--app", "tests.operator._flows:retrying", "--json"])
    assert (code, json.loads(capsys.readouterr().out)["status"]) == (0, "completed")
    code = main(["--store", url, "retry", "r-3"])
    captured = capsys.readouterr()
    assert code == 1
    assert "NotFailed" in captured.err and "nothing was changed" in captured.err

    broken.touch()
    anyio.run(fail, "r-4")
    code = main(["--store", url, "retry", "r-4"])
    assert code == 0
    assert "Retrying: r-4" in capsys.readouterr().out


async def test_the_api_retries_and_refuses_what_did_not_fail(db_store: Store, tmp_path: Path) -> None:
    broken = tmp_path / "ledger-down"
    await failed_run(db_store, "r-5", broken)
    broken.unlink()
    async with serving(db_store, retrying) as client:
        answer = await client.post("/api/executions/r-5/retry")
        assert answer.status_code == 202, answer.text
        assert answer.json()["continuing"] is True
        view = (await client.get("/api/executions/r-5", params={"wait": 30})).json()
        assert view["execution"]["status"] == "completed"
        again = await client.post("/api/executions/r-5/retry")
        assert again.status_code == 409
        assert "did not fail" in again.json()["detail"]
        missing = await client.post("/api/executions/nope/retry")
        assert missing.status_code == 404
