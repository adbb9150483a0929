"""``tether state`` and ``GET /api/executions/{id}/state``: an actor's state, read only, on SQLite and Postgres."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import pytest
from tether.runtime import Resume
from tether.runtime.ops._cli import main
from tether.stores import Store

from tests.runtime.test_query import AUDITOR, team

from .test_cli_operator import FAR_OWNER, journal, on_store, shell, start_far_away, start_two_pauses
from .test_http import paused, serving


def tether(url: str, backend: str, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """main() on this store and backend, as the operator types it."""
    code = main([*args, "--store", url, "--backend", backend])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def row(url: str, execution_id: str) -> Any:
    return on_store(url, lambda store: store.get_execution(execution_id))


def test_tether_state_prints_an_actors_state_and_changes_nothing(
    url: str, backend: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    start_two_pauses(url, "job")
    before, entries = row(url, "job"), journal(url, "job")
    code, out, err = tether(url, backend, capsys, "state", "job", "--json")
    assert code == 0, err
    root = json.loads(out)
    assert (root["execution_id"], root["path"], root["status"]) == ("job", "supervisor:planner", "paused")
    assert root["seq"] == max(e.seq for e in entries if e.path == "supervisor:planner")

    code, out, err = tether(url, backend, capsys, "state", "job", "--path", AUDITOR, "--json")
    assert code == 0, err
    worker = json.loads(out)
    last = [e for e in entries if e.path == AUDITOR][-1]
    assert (worker["path"], worker["seq"], worker["label"]) == (AUDITOR, last.seq, "suspended")

    code, out, err = tether(url, backend, capsys, "state", "job", "--path", AUDITOR)
    assert code == 0, err
    assert out.splitlines()[:2] == [f"job  {AUDITOR}  paused", f"as of #{last.seq} suspended"]
    assert json.loads("\n".join(out.splitlines()[2:])) == worker["state"]
    assert (row(url, "job"), journal(url, "job")) == (before, entries)  # no lease taken, nothing written


def test_tether_state_reads_past_a_live_lease(url: str, backend: str, capsys: pytest.CaptureFixture[str]) -> None:
    start_far_away(url, "far")  # another machine's process holds it, and has journaled nothing yet
    before = row(url, "far")
    code, out, err = tether(url, backend, capsys, "state", "far")
    assert code == 0, err
    assert out.splitlines()[:2] == ["far  chain:slow  running", "no boundary journaled yet"]
    after = row(url, "far")
    assert after == before and after.lease_owner == FAR_OWNER


def test_tether_state_refuses_an_unknown_id_or_path_with_what_to_do(url: str) -> None:
    start_two_pauses(url, "job")
    entries = journal(url, "job")
    code, out, err = shell("state", "nobody", store=url)  # the installed script, in a process of its own
    assert (code, out) == (1, "")
    assert "ExecutionNotFound:" in err and "'nobody'" in err
    code, out, err = shell("state", "job", "--path", "supervisor:planner/worker:nobody", store=url)
    assert (code, out) == (1, "")
    assert "ActorNotFound:" in err and "no actor 'supervisor:planner/worker:nobody'" in err
    assert "'supervisor:planner', 'supervisor:planner/worker:auditor', 'supervisor:planner/worker:security'" in err
    code, out, err = shell("state", "job", "--path", AUDITOR, store=url)
    assert code == 0, err
    assert out.startswith(f"job  {AUDITOR}  paused\n")
    assert journal(url, "job") == entries


async def test_the_state_api_answers_json_and_404s(db_store: Store) -> None:
    planner = team(db_store)
    await planner.run("go", execution_id="t/1")  # a "/" in the id: percent-encoded whole
    entries, before = await db_store.read_journal("t/1"), await db_store.get_execution("t/1")
    base = f"/api/executions/{quote('t/1', safe='')}/state"
    async with serving(db_store, [planner]) as client:
        root = await client.get(base)
        assert root.status_code == 200
        assert root.json() == {"execution_id": "t/1", "path": "supervisor:planner", "status": "paused",
                               "state": {}, "seq": root.json()["seq"], "label": "paused"}
        assert (await client.get(base, params={"path": ""})).json() == root.json()  # an empty path: the root
        worker = (await client.get(base, params={"path": AUDITOR})).json()
        assert (worker["path"], worker["label"]) == (AUDITOR, "suspended")

        missing = await client.get(base, params={"path": f"{AUDITOR}/tool:approve_refund"})
        assert missing.status_code == 404
        assert list(missing.json()) == ["detail"]
        assert f"is a call made by '{AUDITOR}', not an actor" in missing.json()["detail"]
        unknown = await client.get("/api/executions/nope/state")
        assert unknown.status_code == 404
        assert "'nope'" in unknown.json()["detail"]
    assert await db_store.read_journal("t/1") == entries
    assert await db_store.get_execution("t/1") == before

    await planner.resume("t/1", Resume(approved=True))
    async with serving(db_store, [planner]) as client:
        done = (await client.get(base, params={"path": AUDITOR})).json()
    assert (done["status"], done["label"]) == ("completed", "msg:1")


async def test_the_state_api_needs_the_token_and_leaves_an_id_ending_in_state_alone(db_store: Store) -> None:
    await paused(db_store, "r/state")
    async with serving(db_store, token="sesame") as client:
        assert (await client.get("/api/executions/r/state/state")).status_code == 401
        auth = {"authorization": "Bearer sesame"}
        state = await client.get("/api/executions/r/state/state", headers=auth)
        assert state.json()["execution_id"] == "r/state"
        # No execution "r": the whole "r/state" is the id, and the execution is shown.
        shown = await client.get("/api/executions/r/state", headers=auth)
        assert shown.status_code == 200
        assert shown.json()["execution"]["execution_id"] == "r/state"
