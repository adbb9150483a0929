"""The tether CLI as an operator types it: in-process through main(), and through the installed
console script in real processes (COLUMNS and TETHER_STORE in its environment), on SQLite and
Postgres, both backends where the backend runs anything."""

from __future__ import annotations

import getpass
import json
import os
import re
import shlex
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import pytest
from tether.runtime.ops._cli import main
from tether.stores import SCHEMA_VERSION, NewExecution, open_store
from tether.stores._migrations import SQLITE_MIGRATIONS

from . import _two_pauses
from ._two_pauses import AUDITOR, SECURITY
from .conftest import Tether, start_paused

APP = "tests.operator._two_pauses:runners"
FLOWS = "tests.operator._flows:runners"
REFUND = "chain:refund/node:approve"
ROOT = Path(__file__).resolve().parents[2]
TETHER = str(Path(sys.executable).parent / "tether")
FAR_OWNER = "otherhost:123:abcd@0000000000000000.4026531836.1/x"  # another boot id: another machine


def shell(*args: str, store: str | None = None, columns: int = 200, timeout: float = 60) -> tuple[int, str, str]:
    """The installed ``tether`` script in a process of its own; the store only in ``TETHER_STORE``."""
    env = {k: v for k, v in os.environ.items() if k != "TETHER_STORE"}
    env["COLUMNS"] = str(columns)
    if store is not None:
        env["TETHER_STORE"] = store
    done = subprocess.run([TETHER, *args], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=timeout, check=False)
    return done.returncode, done.stdout, done.stderr


def on_store(url: str, job: Callable[[Any], Any]) -> Any:
    async def go() -> Any:
        async with open_store(url) as store:
            return await job(store)

    return anyio.run(go)


def start_two_pauses(url: str, execution_id: str) -> None:
    """The planner paused at both workers' tools in one round."""
    async def job(store: Any) -> None:
        _two_pauses.planner.store = store
        paused = await _two_pauses.planner.run("Go.", execution_id=execution_id)
        assert sorted(p.agent_path for p in paused.pending) == [AUDITOR, SECURITY]

    on_store(url, job)


def start_far_away(url: str, execution_id: str) -> None:
    """A chain:slow execution whose lease (10 minutes) is held by a process on another machine."""
    async def job(store: Any) -> None:
        new = NewExecution(execution_id=execution_id, runner="slow", root_path="chain:slow",
                           fingerprint=_two_pauses.slow.fingerprint, input={})
        started = await store.start_execution(new, owner=FAR_OWNER, lease_seconds=600)
        assert started.created

    on_store(url, job)


def journal(url: str, execution_id: str) -> list[Any]:
    return on_store(url, lambda store: store.read_journal(execution_id))


def assert_fits(out: str, columns: int, *paths: str) -> None:
    """Every line fits; each path is printed, and broken (if at all) only right after a '/'."""
    assert out.strip()
    too_wide = [line for line in out.splitlines() if len(line) > columns]
    assert not too_wide, too_wide
    after_slash = re.sub(r"/\n\s*", "/", out)  # undo the breaks allowed
    anywhere = re.sub(r"\s*\n\s*", "", out)  # undo every break
    for path in paths:
        assert path in after_slash, out
        assert after_slash.count(path) == anywhere.count(path), f"{path} broken inside a segment:\n{out}"


# 1. --store before or after the command, and from TETHER_STORE


def test_store_before_after_and_from_the_environment(url: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    monkeypatch.delenv("TETHER_STORE", raising=False)
    start_paused(url, "r-1")
    missing = f"sqlite:///{tmp_path / 'missing.db'}"

    def run(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    for command in (["pending"], ["show", "r-1"], ["executions"], ["doctor"]):
        assert run(*command, "--store", url)[0] == 0
        assert run("--store", url, *command)[0] == 0
        code, out, _ = run("--store", missing, *command, "--store", url)  # the one after wins
        assert code == 0, out
        code, _, err = run("--store", url, *command, "--store", missing)
        assert code == 1
        assert "No tether store at" in err and "missing.db" in err
    assert "r-1" in run("pending", "--store", url, "--backend", "trio")[1]
    # Every acting command takes it after the command too: each names the missing store.
    for command in (["resume", "r-1", "--set", "approved=true"], ["recover", "r-1", "--app", FLOWS],
                    ["cancel", "r-1"], ["prune", "--older-than", "1d"]):
        code, _, err = run("--store", url, *command, "--store", missing)
        assert code == 1, command
        assert "missing.db" in err
    assert run("migrate", "--store", missing)[0] == 0
    assert run("pending", "--store", missing)[1].strip() == "Nothing is pending."
    for command in ("serve", "worker", "demo"):  # these run until stopped: the option is there
        assert "--store URL" in run(command, "--help")[1]
    monkeypatch.setenv("TETHER_STORE", url)
    assert "r-1" in run("pending")[1]
    monkeypatch.setenv("TETHER_STORE", f"sqlite:///{tmp_path / 'elsewhere.db'}")
    assert "r-1" in run("pending", "--store", url)[1]
    assert "r-1" in run("--store", url, "pending")[1]

    # The installed script, in a process of its own.
    code, out, _ = shell("pending", store=url)
    assert code == 0 and "r-1" in out and REFUND in out
    code, out, _ = shell("show", "r-1", "--store", url, store=missing)
    assert code == 0 and "paused" in out
    gone = f"sqlite:///{tmp_path / 'gone.db'}"
    code, _, err = shell("--store", url, "show", "r-1", "--store", gone, store=url)
    assert code == 1 and "No tether store at" in err and "gone.db" in err


# 2. executions: the most recently updated first, across the table


def test_executions_are_the_most_recently_updated(tether: Tether, url: str) -> None:
    for n in range(4):
        start_paused(url, f"e-{n}")
    code, out, _ = tether("resume", "e-0", "--set", "approved=true")  # the oldest, updated last
    assert code == 0, out
    rows = json.loads(tether("executions", "--limit", "3", "--json")[1])
    assert [r["execution_id"] for r in rows] == ["e-0", "e-3", "e-2"]
    code, out, _ = shell("executions", "--limit", "3", "--json", store=url)
    assert code == 0
    assert [r["execution_id"] for r in json.loads(out)] == ["e-0", "e-3", "e-2"]
    code, out, _ = tether("executions", "--limit", "3")
    assert code == 0
    assert "3 executions" in out
    assert out.index("e-0") < out.index("e-3") < out.index("e-2")
    assert "e-1" not in out
    _, out, _ = tether("executions", "--limit", "1")
    assert "1 execution" in out and "1 executions" not in out
    decided = json.loads(tether("executions", "--status", "decided", "--json")[1])
    assert [r["execution_id"] for r in decided] == ["e-0"]

    async def enqueue(store: Any) -> None:
        await store.enqueue_execution(NewExecution(execution_id="q-1", runner="refund", root_path="chain:refund"))

    on_store(url, enqueue)
    assert [r["execution_id"] for r in json.loads(tether("executions", "--status", "queued", "--json")[1])] == ["q-1"]
    code, out, _ = tether("executions", "--status", "failed")
    assert code == 0 and "No failed executions." in out


# 3. Read-only and acting commands never create or migrate a store; migrate does


def test_a_missing_store_is_refused_and_left_missing(url: str, request: pytest.FixtureRequest,
                                                     capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    monkeypatch.delenv("TETHER_STORE", raising=False)
    commands = [["pending"], ["show", "x"], ["executions"], ["doctor"], ["resume", "x", "--set", "approved=true"],
                ["recover", "x", "--app", FLOWS], ["cancel", "x"], ["prune", "--older-than", "1d"]]
    for command in commands:
        assert main(["--store", url, *command]) == 1, command
        err = capsys.readouterr().err
        assert "No tether store" in err, err
        assert "migrate" in err  # how to make one
        assert not exists(url, request)
    code, _, err = shell("pending", store=url)
    assert code == 1 and "No tether store" in err
    assert not exists(url, request)
    assert main(["--store", "sqlite://relative.db", "pending"]) == 1  # malformed: the same code
    assert "names no file" in capsys.readouterr().err
    assert main(["--store", url, "migrate"]) == 0
    assert "schema version" in capsys.readouterr().out
    assert exists(url, request)
    assert main(["--store", url, "pending"]) == 0
    assert capsys.readouterr().out.strip() == "Nothing is pending."
    code, out, _ = shell("doctor", store=url)
    assert code == 0 and "no problems found" in out


def exists(url: str, request: pytest.FixtureRequest) -> bool:
    """Whether the store's file (SQLite) or schema (Postgres) exists."""
    if url.startswith("sqlite:"):
        return Path(url[len("sqlite:///"):]).exists()

    async def look() -> bool:
        conn = await asyncpg.connect(request.getfixturevalue("postgres_dsn"))
        try:
            return bool(await conn.fetchval("SELECT count(*) FROM pg_namespace WHERE nspname = $1",
                                            request.getfixturevalue("pg_schema")))
        finally:
            await conn.close()

    return anyio.run(look)


def test_sqlite_hints_and_foreign_files(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    assert main(["--store", f"sqlite:///{tmp_path / 'tether.db'}", "migrate"]) == 0
    capsys.readouterr()
    typo = tmp_path / "tehter.db"
    assert main(["--store", f"sqlite:///{typo}", "pending"]) == 1
    assert f"did you mean sqlite:///{tmp_path / 'tether.db'}?" in capsys.readouterr().err
    assert not typo.exists()
    app = tmp_path / "app.db"
    db = sqlite3.connect(app)
    db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, total INTEGER)")
    db.execute("INSERT INTO orders (total) VALUES (50000)")
    db.commit()
    db.close()
    before = app.read_bytes()
    for command in (["pending"], ["show", "x"], ["executions"], ["doctor"], ["cancel", "x"],
                    ["resume", "x", "--set", "approved=true"], ["prune", "--older-than", "1d"]):
        assert main(["--store", f"sqlite:///{app}", *command]) == 1
        assert "no tether tables" in capsys.readouterr().err
    code, _, err = shell("pending", store=f"sqlite:///{app}")
    assert code == 1 and "No tether store at" in err
    assert app.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db", "tether.db"]  # no -wal, no -shm


def test_migrate_upgrades_an_older_store(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    for version, statements in enumerate(SQLITE_MIGRATIONS[:SCHEMA_VERSION]):
        for statement in statements:
            db.execute(statement)
        if version:
            db.execute("INSERT INTO tether_schema (version, applied_at) VALUES (?, 0)", (version,))
    db.commit()
    db.close()
    before = path.read_bytes()
    url = f"sqlite:///{path}"
    assert main(["pending", "--store", url]) == 1
    err = capsys.readouterr().err
    assert f"SchemaVersionError: The database has schema version {SCHEMA_VERSION - 1}, older" in err
    assert f"To migrate it: tether --store {url} migrate" in err
    assert path.read_bytes() == before
    assert main(["migrate", "--store", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"store": url, "schema_version": SCHEMA_VERSION}
    assert main(["pending", "--store", url]) == 0
    assert capsys.readouterr().out.strip() == "Nothing is pending."


# 4. --json is an output flag everywhere; --decision is the decision


def test_json_everywhere(tether: Tether, url: str) -> None:
    for n in (1, 2, 3, 4):
        start_paused(url, f"j-{n}")
    assert [r["execution_id"] for r in json.loads(tether("pending", "--json")[1])] == ["j-1", "j-2", "j-3", "j-4"]
    assert len(json.loads(tether("executions", "--json")[1])) == 4
    assert json.loads(tether("show", "j-1", "--json")[1])["execution"]["status"] == "paused"
    recorded = json.loads(tether("resume", "j-1", "--set", "approved=true", "--json")[1])
    assert recorded["status"] == "decided" and recorded["decision"]["value"]["approved"] is True
    done = json.loads(tether("resume", "j-2", "--decision", '{"approved": true}', "--app", FLOWS, "--json")[1])
    assert done["status"] == "completed" and done["output"]["charged"] == 50_000
    assert json.loads(tether("recover", "j-1", "--app", FLOWS, "--json")[1])["status"] == "completed"
    assert json.loads(tether("cancel", "j-3", "--json")[1])["status"] == "cancelled"
    # The old spelling: --json JSON is the decision, with a notice; the output stays text.
    code, out, err = tether("resume", "j-4", "--json", '{"approved": false}')
    assert code == 0
    assert "deprecated" in err and "--decision" in err
    assert out.startswith("Decision recorded for j-4")
    assert json.loads(tether("prune", "--older-than", "0s", "--json")[1]) == {"deleted": 3}
    assert json.loads(tether("doctor", "--json")[1])["problems"] == []
    assert isinstance(json.loads(tether("migrate", "--json")[1])["schema_version"], int)
    code, _, err = tether("resume", "j-4", "--decision", '{"approved": true}', "--json", '{"approved": true}')
    assert code == 2 and "not with both" in err


def test_json_through_the_script(url: str) -> None:
    start_paused(url, "s-1")
    code, out, err = shell("resume", "s-1", "--set", "approved=true", "--json", store=url)
    assert code == 0, err
    assert json.loads(out)["decision"]["path"] == REFUND
    code, out, err = shell("recover", "s-1", "--app", FLOWS, "--json", "--backend", "trio", store=url)
    assert code == 0, err
    assert json.loads(out)["output"]["charged"] == 50_000


# 5. Output fits the terminal; paths break only after a '/'; every paused path is printed


@pytest.mark.parametrize("columns", [60, 40])
def test_output_fits_the_terminal(url: str, columns: int) -> None:
    start_two_pauses(url, "two")
    start_paused(url, "one")
    code, out, err = shell("pending", store=url, columns=columns)
    assert code == 0, err
    assert_fits(out, columns, AUDITOR, SECURITY, REFUND)
    code, out, err = shell("show", "two", store=url, columns=columns)
    assert code == 0, err
    assert_fits(out, columns, AUDITOR, SECURITY)
    assert re.sub(r"/\n\s*", "/", out).count(AUDITOR) == 2  # pending, and the journal's "suspended at"
    code, out, err = shell("recover", "two", "--app", APP, store=url, columns=columns)
    assert code == 0, err
    assert_fits(out, columns, AUDITOR, SECURITY)
    assert out.startswith("paused at 2 paths:")
    code, out, err = shell("resume", "two", "--path", AUDITOR, "--set", "approved=true", "--app", APP,
                           store=url, columns=columns)
    assert code == 0, err
    assert_fits(out, columns, SECURITY)
    assert AUDITOR not in re.sub(r"/\n\s*", "/", out)
    code, out, err = shell("resume", "one", "--set", "approved=true", store=url, columns=columns)
    assert code == 0, err
    assert_fits(out, columns)
    assert "recover one --app module:attr" in " ".join(out.split())
    assert f"--store{shlex.quote(url)}recoverone" in re.sub(r"\s+", "", out)  # the URL may be cut anywhere at 40
    code, out, err = shell("show", "one", store=url, columns=columns)
    assert code == 0, err
    assert_fits(out, columns, REFUND)
    code, out, err = shell("executions", store=url, columns=columns)
    assert code == 0, err
    assert_fits(out, columns, "two", "one")
    code, _, err = shell("show", "missing-one", store=url, columns=columns)
    assert code == 1
    assert_fits(err, columns, "missing-one")


def test_every_paused_path_is_printed(tether: Tether, url: str) -> None:
    start_two_pauses(url, "two")
    for args in (["recover", "two", "--app", APP], ["resume", "two", "--app", APP]):
        code, out, _ = tether(*args)
        assert code == 0, out
        assert "paused at 2 paths:" in out and AUDITOR in out and SECURITY in out
    code, out, _ = tether("resume", "two", "--path", SECURITY, "--set", "approved=true", "--app", APP)
    assert code == 0
    assert out.strip() == f'paused at {AUDITOR}: manager_approval {{"amount": 50000}}'
    code, out, _ = tether("resume", "two", "--path", AUDITOR, "--set", "approved=true", "--app", APP)
    assert code == 0
    assert out.strip() == 'completed: "both done"'


def test_text_from_the_store_is_never_markup(tether: Tether, url: str) -> None:
    start_paused(url, "[bold]r[/]", note="[/] [red]not a style")
    for args in (["pending"], ["show", "[bold]r[/]"], ["executions"]):
        code, out, _ = tether(*args)
        assert code == 0
        assert "[bold]r[/]" in out
    assert "[/] [red]not a style" in tether("pending")[1]
    code, _, err = tether("show", "[/]")  # an error message quotes the id
    assert code == 1
    assert "ExecutionNotFound: No execution '[/]'" in err


# 6. A decision recorded without the runner is visible, then carried out


def test_a_recorded_decision_is_visible_then_carried_out(tether: Tether, url: str) -> None:
    start_paused(url, "d-1")
    start_paused(url, "d-2")
    code, out, _ = tether("resume", "d-1", "--set", "approved=true", "--by", "alice")
    assert code == 0
    assert out.startswith("Decision recorded for d-1 (by alice)")
    assert "No process here continues the run" in out
    assert f"tether --store {shlex.quote(url)} recover d-1 --app module:attr" in out
    _, out, _ = tether("resume", "d-2", "--decision", '{"approved": false}')
    assert f"(by cli:{getpass.getuser()})" in out
    _, out, _ = tether("executions")
    assert re.search(r"decided by alice, \d+s ago", out)  # seconds, however slow the machine
    assert f"decided by cli:{getpass.getuser()}" in out
    rows = {r["execution_id"]: r for r in json.loads(tether("executions", "--json")[1])}
    assert rows["d-1"]["status"] == "decided" and rows["d-1"]["decision"]["by"] == "alice"
    _, out, _ = tether("show", "d-1")
    assert "d-1  chain:refund  decided" in out
    assert re.search(r"decided \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC by alice at chain:refund/node:approve: "
                     r'\{"approved": true', out)
    assert f"tether --store {shlex.quote(url)} recover d-1 --app module:attr" in out
    view = json.loads(tether("show", "d-1", "--json")[1])
    decision = view["decision"]
    assert decision["by"] == "alice" and decision["path"] == REFUND and decision["value"]["approved"] is True
    assert datetime.now(UTC) - datetime.fromisoformat(decision["at"]) < timedelta(minutes=1)
    assert view["pending"] == []
    code, out, _ = tether("recover", "d-1", "--app", FLOWS)
    assert code == 0
    assert out.startswith("completed:") and '"charged": 50000' in out
    view = json.loads(tether("show", "d-1", "--json")[1])
    assert view["execution"]["status"] == "completed" and view["decision"] is None
    code, _, err = tether("cancel", "d-1")
    assert code == 1
    assert err.strip() == "Not cancelled: d-1 had already completed; a finished execution stays as it ended."
    assert '"charged": 0' in tether("recover", "d-2", "--app", FLOWS)[1]


def test_a_recorded_decision_through_the_script(url: str) -> None:
    start_paused(url, "d-3")
    code, out, err = shell("resume", "d-3", "--set", "approved=true", store=url)
    assert code == 0, err
    assert f"(by cli:{getpass.getuser()})" in out
    assert f"tether --store {shlex.quote(url)} recover d-3 --app module:attr" in out
    _, out, _ = shell("executions", "--status", "decided", store=url)
    assert "d-3" in out and f"decided by cli:{getpass.getuser()}" in out


# 7. recover after a real SIGKILL; a lease on another machine needs --force


def test_recover_after_sigkill_is_at_once(url: str, backend: str) -> None:
    child = [sys.executable, "-m", "tests.operator._two_pauses", url, "k-1"]
    with subprocess.Popen(child, stdout=subprocess.PIPE, text=True, cwd=ROOT) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "in block"  # it holds the lease, inside the node
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    _, out, _ = shell("show", "k-1", store=url)
    assert "running" in out and "lease:" in out
    # The lease has 60 s to run; a wait for it would hit the timeout.
    code, out, err = shell("recover", "k-1", "--app", APP, "--backend", backend, store=url, timeout=30)
    assert code == 0, err
    assert out.strip() == 'completed: {"blocked": false, "finished": true}'
    [takeover] = [e.payload for e in journal(url, "k-1") if e.label == "takeover"]
    assert takeover["dead"] is True and takeover["forced"] is False


def test_a_lease_on_another_machine_needs_force(tether: Tether, url: str) -> None:
    start_far_away(url, "far-1")
    code, _, err = tether("recover", "far-1", "--app", APP)
    assert code == 1
    assert "LeaseHeld" in err and FAR_OWNER in err
    assert "recover far-1 --app module:attr --force" in err
    code, out, err = tether("recover", "far-1", "--app", APP, "--force")
    assert code == 0, err
    assert out.startswith("completed:")
    [takeover] = [e.payload for e in journal(url, "far-1") if e.label == "takeover"]
    assert takeover["from"] == FAR_OWNER and takeover["forced"] is True
    assert takeover["operator"] == getpass.getuser()
    assert f"forced by {getpass.getuser()}" in tether("show", "far-1")[1]

    start_far_away(url, "far-2")
    code, _, err = tether("cancel", "far-2", "--wait", "0.2")
    assert code == 1 and "LeaseHeld" in err and FAR_OWNER in err
    assert "cancel is recorded" in err and "far-2 --force" in err
    code, out, _ = tether("cancel", "far-2", "--force")
    assert code == 0 and out.startswith("cancelled: Cancelled by cli:")
    [takeover] = [e.payload for e in journal(url, "far-2") if e.label == "takeover"]
    assert takeover["forced"] is True and takeover["operator"] == getpass.getuser()


def test_force_through_the_script(url: str) -> None:
    start_far_away(url, "far-3")
    code, _, err = shell("recover", "far-3", "--app", APP, store=url)
    assert code == 1 and "LeaseHeld" in err and "--force" in err
    code, out, err = shell("recover", "far-3", "--app", APP, "--force", "--backend", "trio", store=url)
    assert code == 0, err
    assert out.startswith("completed:")
    start_far_away(url, "far-4")
    code, out, err = shell("cancel", "far-4", "--force", store=url)
    assert code == 0, err
    assert out.startswith("cancelled: Cancelled by cli:")


# 8. doctor


def test_doctor_finds_a_broken_invariant(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    path = tmp_path / "ops.db"
    url = f"sqlite:///{path}"
    start_paused(url, "b-1")
    assert main(["doctor", "--store", url]) == 0
    assert capsys.readouterr().out.strip() == f"{url}: no problems found."
    db = sqlite3.connect(path)
    with db:
        db.execute("DELETE FROM tether_journal WHERE execution_id = 'b-1' AND seq = "
                   "(SELECT seq FROM tether_pending WHERE execution_id = 'b-1')")
    db.close()
    assert main(["doctor", "--store", url]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"1 problem in {url}:")
    assert "'b-1'" in out and "suspended" in out
    code, out, _ = shell("doctor", "--json", store=url)
    assert code == 1
    [problem] = json.loads(out)["problems"]
    assert "'b-1'" in problem
    code, out, _ = shell("doctor", store=url)
    assert code == 1 and "1 problem in" in out
