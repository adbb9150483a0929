"""The tether CLI against SQLite and Postgres, on both backends: every command, and its refusals."""

from __future__ import annotations

import json
from collections.abc import Callable

import anyio
import pytest
from tether.runtime.ops._cli import main
from tether.stores import open_store

from .conftest import start_paused

APP = "tests.operator._flows:runners"
PATH = "chain:refund/node:approve"
Tether = Callable[..., tuple[int, str, str]]


@pytest.fixture(params=["asyncio", "trio"])
def tether(request: pytest.FixtureRequest, url: str, capsys: pytest.CaptureFixture[str]) -> Tether:
    """``tether(*args)`` runs the CLI on this store and backend; returns (exit code, stdout, stderr)."""
    def run(*args: str) -> tuple[int, str, str]:
        code = main(["--store", url, "--backend", request.param, *args])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


def pending_paths(url: str) -> list[str]:
    async def read() -> list[str]:
        async with open_store(url) as store:
            return [p.agent_path for p in await store.list_pending()]

    return anyio.run(read)


def test_pending_lists_full_paths(tether: Tether, url: str) -> None:
    start_paused(url, "r-1")
    code, out, _ = tether("pending")
    assert code == 0
    assert "r-1" in out and PATH in out and "manager_approval" in out
    code, out, _ = tether("pending", "--json")
    rows = json.loads(out)
    assert [(r["execution_id"], r["agent_path"], r["context"]["amount"]) for r in rows] == [("r-1", PATH, 50_000)]
    _, out, _ = tether("pending", "--path-prefix", "supervisor:", "--json")
    assert json.loads(out) == []


def test_show_tells_the_story(tether: Tether, url: str) -> None:
    start_paused(url, "r-2")
    code, out, _ = tether("show", "r-2")
    assert code == 0
    assert "paused" in out and f"pending {PATH}" in out
    assert "node:validate" in out and "suspended at chain:refund/node:approve" in out
    view = json.loads(tether("show", "r-2", "--json")[1])
    assert view["execution"]["status"] == "paused"
    assert [e["label"] for e in view["journal"]][:2] == ["inbox", "node:validate"]
    code, _, err = tether("show", "nope")
    assert code == 1
    assert "ExecutionNotFound" in err


def test_resume_decides_continues_and_refuses_a_second(tether: Tether, url: str) -> None:
    start_paused(url, "r-3")
    code, out, _ = tether("resume", "r-3", "--set", "approved=true", "--set", "metadata.approver=alice",
                          "--app", APP)
    assert code == 0, out
    assert "completed" in out and '"charged": 50000' in out and '"approver": "alice"' in out
    code, _, err = tether("resume", "r-3", "--json", '{"approved": false}', "--app", APP)
    assert code == 2
    assert "Already resumed" in err


def test_bad_decisions_consume_nothing(tether: Tether, url: str) -> None:
    start_paused(url, "r-4")
    code, _, err = tether("resume", "r-4", "--set", "approved=maybe", "--app", APP)
    assert code == 2
    assert "Not a valid decision" in err
    code, _, err = tether("resume", "r-4", "--json", "{not json", "--app", APP)
    assert code == 2
    assert "--json is not JSON" in err
    code, _, err = tether("resume", "r-4", "--set", "approved", "--app", APP)
    assert code == 1
    assert "key=value" in err
    code, _, err = tether("resume", "r-4", "--set", "approved=true", "--app", "tests.operator._flows:changed")
    assert code == 1
    assert "members changed" in " ".join(err.split())  # however the terminal wraps it
    assert pending_paths(url) == [PATH]


def test_a_decision_without_the_runner_is_recorded_then_carried_on(tether: Tether, url: str) -> None:
    start_paused(url, "r-5")
    code, out, _ = tether("resume", "r-5", "--set", "approved=false")
    assert code == 0
    assert "Decision recorded" in out
    assert pending_paths(url) == []
    code, out, _ = tether("resume", "r-5", "--app", APP)  # recovery: carries the recorded decision out
    assert code == 0
    assert '"approved": false' in out and '"charged": 0' in out


def test_cancel_executions_and_prune(tether: Tether, url: str) -> None:
    start_paused(url, "r-6")
    code, out, _ = tether("cancel", "r-6")
    assert code == 0
    assert "cancelled" in out
    assert pending_paths(url) == []
    rows = json.loads(tether("executions", "--status", "cancelled", "--json")[1])
    assert [r["execution_id"] for r in rows] == ["r-6"]
    code, out, _ = tether("prune", "--older-than", "0s")
    assert code == 0
    assert "Deleted 1 finished execution " in out
    assert json.loads(tether("executions", "--json")[1]) == []
    code, _, err = tether("prune", "--older-than", "soon")
    assert code == 1
    assert "30d" in err


def test_app_specs_are_checked(tether: Tether) -> None:
    code, _, err = tether("resume", "x", "--app", "tests.operator._flows")
    assert code == 1
    assert "module:attr" in err
    code, _, err = tether("resume", "x", "--app", "tests.operator._flows:nothing")
    assert code == 1
    assert "has no 'nothing'" in err
    code, _, err = tether("resume", "x", "--app", "tests.operator._flows:validate")
    assert code == 1
    assert "must name a runner" in err
