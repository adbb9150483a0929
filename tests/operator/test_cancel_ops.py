"""``POST /api/executions/{id}/cancel`` and ``tether cancel``: cancelled once, refusals that change nothing."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from tether.runtime.ops._cli import main
from tether.stores import PostgresStore

from .test_http import paused, serving

if TYPE_CHECKING:
    import pytest
    from tether.stores import Store


async def test_the_api_cancels_a_paused_execution_and_says_who(db_store: Store) -> None:
    await paused(db_store, "c-1")
    async with serving(db_store) as client:
        answer = await client.post("/api/executions/c-1/cancel", json={"reason": "duplicate order"})
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "cancelled"
        assert (await client.get("/api/pending")).json() == []
        refused = await client.post("/api/executions/c-1/resume", json={"approved": True})
        assert refused.status_code == 409
        assert "cancelled" in refused.json()["detail"]
        again = await client.post("/api/executions/c-1/cancel")  # a second cancel is told the same
        assert (again.status_code, again.json()["status"]) == (200, "cancelled")
    [verdict] = (await db_store.read_journal("c-1"))[-1:]
    assert (verdict.label, verdict.payload) == ("cancelled", {"by": "api", "reason": "duplicate order"})


async def test_the_api_refuses_bad_cancels_and_changes_nothing(db_store: Store) -> None:
    await paused(db_store, "c-2")
    journal = await db_store.read_journal("c-2")
    async with serving(db_store) as client:
        missing = await client.post("/api/executions/nope/cancel")
        assert missing.status_code == 404
        assert "nope" in missing.json()["detail"]
        not_json = await client.post("/api/executions/c-2/cancel", content=b"{oops")
        assert not_json.status_code == 400
        assert "nothing was cancelled" in not_json.json()["detail"]
        bad_reason = await client.post("/api/executions/c-2/cancel", json={"reason": 7})
        assert bad_reason.status_code == 422
        bad_wait = await client.post("/api/executions/c-2/cancel?wait=soon")
        assert bad_wait.status_code == 400
    execution = await db_store.get_execution("c-2")
    assert (execution.status, execution.cancel) == ("paused", None)
    assert await db_store.read_journal("c-2") == journal


async def test_the_api_refuses_to_cancel_a_finished_execution(db_store: Store) -> None:
    await paused(db_store, "c-3")
    async with serving(db_store) as client:
        await client.post("/api/executions/c-3/resume", json={"approved": True})
        await client.get("/api/executions/c-3", params={"wait": 30})
        done = await client.post("/api/executions/c-3/cancel")
    assert done.status_code == 409
    assert "had already completed" in done.json()["detail"]
    assert (await db_store.get_execution("c-3")).status == "completed"


def test_tether_cancel_of_an_unknown_id_fails_and_records_nothing(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from .conftest import start_paused

    start_paused(url, "c-5")
    code = main(["--store", url, "cancel", "nobody", "--reason", "x"])
    captured = capsys.readouterr()
    assert code == 1
    assert "ExecutionNotFound" in captured.err
    assert "nobody" in captured.err


def test_tether_cancel_no_wait_records_the_request(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from .conftest import start_paused

    start_paused(url, "c-4")
    code = main(["--store", url, "cancel", "c-4", "--no-wait", "--by", "ops:carol", "--json"])
    printed = json.loads(capsys.readouterr().out)
    assert (code, printed["status"]) == (0, "cancelled")  # paused: cancelled at once, waiting or not
    assert printed["error"] == "Cancelled by ops:carol"


async def test_a_reason_the_store_cannot_keep_is_refused_and_cancels_nothing(db_store: Store) -> None:
    # Postgres keeps no NUL character in its JSON columns; SQLite does (found by the API fuzz).
    await paused(db_store, "c-4")
    journal = await db_store.read_journal("c-4")
    async with serving(db_store) as client:
        answer = await client.post("/api/executions/c-4/cancel", json={"reason": "a\u0000b"})
    if isinstance(db_store, PostgresStore):
        assert answer.status_code == 400, answer.text
        assert "nothing was cancelled" in answer.json()["detail"]
        execution = await db_store.get_execution("c-4")
        assert (execution.status, execution.cancel) == ("paused", None)
        assert await db_store.read_journal("c-4") == journal
    else:
        assert (answer.status_code, answer.json()["status"]) == (200, "cancelled")
        assert (await db_store.read_journal("c-4"))[-1].payload["reason"] == "a\u0000b"
