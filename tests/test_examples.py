"""The example programs run, as a user would run them, against a real store."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import httpx
import pytest
from tether.runtime import read_event
from tether.stores import NewEntry, NewExecution, NewInterrupt, SQLiteStore

from tests._postgres import admin_sql, with_database

EXAMPLES = Path(__file__).parent.parent / "examples"
PATH = "supervisor:planner/worker:auditor/tool:approve_refund"


async def pause_one(db: Path) -> None:
    async with SQLiteStore(db) as store:
        started = await store.start_execution(
            NewExecution(execution_id="job-42", runner="planner", root_path="supervisor:planner"),
            owner="app", lease_seconds=60,
        )
        assert started.lease is not None
        await store.suspend(started.lease, [NewEntry(path=PATH, label="turn:2/tool:approve_refund",
                                                     kind="suspended")],
                            NewInterrupt(path=PATH, reason="manager_approval", context={"amount": 50_000}))
        await store.release_lease(started.lease, status="paused")


def inbox(db: Path, backend: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / "approvals_inbox.py"), "--store", f"sqlite:///{db}",
         "--backend", backend, *args],
        capture_output=True, text=True, timeout=60, check=False,
    )


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_approvals_inbox(tmp_path: Path, backend: str) -> None:
    db = tmp_path / "app.db"
    anyio.run(pause_one, db)
    listing = inbox(db, backend)
    assert listing.returncode == 0, listing.stderr
    assert PATH in listing.stdout and "manager_approval" in listing.stdout and "50000" in listing.stdout

    approved = inbox(db, backend, "--approve", "job-42", "--path", PATH, "--by", "alice")
    assert approved.returncode == 0, approved.stderr
    assert "approved job-42" in approved.stdout

    late = inbox(db, backend, "--reject", "job-42", "--path", PATH, "--by", "bob")
    assert late.returncode == 2
    assert "already resumed" in late.stdout
    assert "Nothing is waiting" in inbox(db, backend).stdout


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_ledger_actor_survives_sigkill(kind: str, backend: str, tmp_path: Path,
                                       request: pytest.FixtureRequest) -> None:
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'ledger.db'}"
    else:
        # The example keeps its tables in the default schema: give it a database of its own.
        dsn = request.getfixturevalue("postgres_dsn")
        name = f"ledger_{request.getfixturevalue('pg_schema')}"
        admin_sql(dsn, f'CREATE DATABASE "{name}"')
        url = with_database(dsn, name)
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "ledger_actor.py"), "demo", "--store", url, "--backend", backend],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every acknowledged deposit survived, none twice" in done.stdout
    if kind == "postgres":
        admin_sql(dsn, f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_own_llm_adapter_runs_an_agent(backend: str) -> None:
    done = subprocess.run([sys.executable, str(EXAMPLES / "own_llm.py"), "--backend", backend],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"completed on {backend}: Order status: order 7: $120, shipped on Monday" in done.stdout
    assert "turn:1/tool:lookup_order" in done.stdout
    assert "the client was asked 2 times" in done.stdout  # the second run of order-7 asked nobody


class OperatorShell:
    """The commands an example's docstring shows, typed in one directory with the default store.

    ``python examples/x.py`` and the installed ``tether`` both use ``sqlite:///tether.db`` there;
    ``examples.x`` imports through PYTHONPATH, as from the repository's root.
    """

    def __init__(self, cwd: Path, backend: str) -> None:
        self.cwd, self.backend = cwd, backend
        self.env = {k: v for k, v in os.environ.items() if k not in ("TETHER_STORE", "TETHER_TOKEN")}
        self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(EXAMPLES.parent), os.environ.get("PYTHONPATH")]))
        self.said: list[str] = []  # everything every command printed, to count side effects

    def _run(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, cwd=self.cwd,
                              env=self.env)
        self.said.append(done.stdout)
        return done

    def python(self, example: str, *args: str) -> subprocess.CompletedProcess[str]:
        return self._run([sys.executable, str(EXAMPLES / example), "--backend", self.backend, *args])

    def tether(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self._run([TETHER, "--backend", self.backend, *args])

    def hinted(self, output: str) -> subprocess.CompletedProcess[str]:
        """Run the ``tether ...`` command an example printed, as printed."""
        [line] = [line.strip() for line in output.splitlines() if line.strip().startswith("tether ")]
        return self.tether(*shlex.split(line)[1:])

    def count(self, text: str) -> int:
        return sum(out.count(text) for out in self.said)


TETHER = str(Path(sys.executable).with_name("tether"))
RUNNER_EXAMPLES = [
    ("refund_chain.py", "refund-abc", "chain:refund/node:approve_refund", '"message": "$50,000 refunded"'),
    ("refund_agent.py", "refund-bot-1", "agent:refund-bot/tool:approve_refund",
     "Refund processed: refund of $50,000 sent."),
    ("content_swarm.py", "trip-456", "swarm:content_team/agent:analyst/tool:approve_publish",
     "Report: tide energy, three sources, cleared by the editor."),
    ("planner_supervisor.py", "job-42", "supervisor:planner/worker:auditor/tool:approve_refund",
     "Order R-7: $42,000 for ACME. Refund: R-7: refunded $42,000."),
]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize(("name", "execution_id", "paused_at", "done"), RUNNER_EXAMPLES,
                         ids=[e[0] for e in RUNNER_EXAMPLES])
def test_the_operators_path_of_each_example(tmp_path: Path, backend: str, name: str, execution_id: str,
                                             paused_at: str, done: str) -> None:
    shell = OperatorShell(tmp_path, backend)
    first = shell.python(name)
    assert first.returncode == 0, first.stderr
    assert f"paused at {paused_at}" in first.stdout
    listed = shell.tether("pending")  # the same default store as the script's
    assert listed.returncode == 0, listed.stderr
    assert execution_id in listed.stdout and paused_at in listed.stdout
    resumed = shell.hinted(first.stdout)  # tether resume ID --set approved=true --app examples.x:runners
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert resumed.stdout.startswith("completed") or "\ncompleted: " in resumed.stdout
    assert done in resumed.stdout
    late = shell.python(name, "--reject")
    assert late.returncode == 2
    assert "Already decided" in late.stdout
    # The script pages the manager; the CLI, which loads the code as examples.<name>, does not again.
    assert shell.count("paging a manager") == (1 if name in ("refund_chain.py", "refund_agent.py") else 0)
    if name == "refund_agent.py":
        assert shell.count("refunding $50,000") == 1


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_refund_chain_is_forked_as_its_docstring_shows(tmp_path: Path, backend: str) -> None:
    shell = OperatorShell(tmp_path, backend)
    assert shell.python("refund_chain.py").returncode == 0
    assert shell.python("refund_chain.py", "--approve").returncode == 0
    listed = shell.tether("history", "refund-abc")
    assert listed.returncode == 0, listed.stderr
    assert "node:validate" in listed.stdout and "node:approve_refund" in listed.stdout
    forked = shell.tether("fork", "refund-abc", "--at", "node:validate", "--as", "refund-abc-2",
                          "--app", "examples.refund_chain:runners")
    assert forked.returncode == 0, forked.stderr
    assert "chain:refund/node:approve_refund" in forked.stdout  # the fork waits for its own decision
    assert shell.count("paging a manager") == 2  # once for the run, once for its fork
    shown = shell.tether("show", "refund-abc-2")
    assert "forked from refund-abc at" in shown.stdout


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_refund_chain_is_approved_through_tether_serve(tmp_path: Path, backend: str) -> None:
    shell = OperatorShell(tmp_path, backend)
    assert shell.python("refund_chain.py").returncode == 0  # pages once, pauses
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with subprocess.Popen([TETHER, "--backend", backend, "serve", "--app", "examples.refund_chain:runners",
                           "--port", str(port)], cwd=tmp_path, env=shell.env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True) as server:
        assert server.stdout is not None
        try:
            for line in server.stdout:  # uvicorn and hypercorn both say so once they listen
                if "Uvicorn running on" in line or "Running on" in line:
                    break
            base = f"http://127.0.0.1:{port}"
            accepted = httpx.post(f"{base}/api/executions/refund-abc/resume", timeout=30,
                                  json={"approved": True, "metadata": {"approver": "alice"}})
            assert accepted.status_code == 202, accepted.text
            assert accepted.json()["continuing"] is True
            view = httpx.get(f"{base}/api/executions/refund-abc", params={"wait": 30}, timeout=60).json()
        finally:
            server.terminate()
            shell.said.append(server.communicate(timeout=60)[0])
    assert view["execution"]["status"] == "completed"
    assert view["execution"]["result"]["message"] == "$50,000 refunded"
    assert shell.count("paging a manager") == 1  # not again in the server, which loaded examples.refund_chain


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_side_effect_runs_once_whatever_name_its_module_is_loaded_under(tmp_path: Path, backend: str) -> None:
    shell = OperatorShell(tmp_path, backend)
    # python -m examples.refund_chain (module __main__, spec examples.refund_chain), then the script
    by_module = shell._run([sys.executable, "-m", "examples.refund_chain", "--backend", backend,
                            "--execution-id", "m-1"])
    assert by_module.returncode == 0, by_module.stderr
    approved = shell.python("refund_chain.py", "--approve", "--execution-id", "m-1")
    assert approved.returncode == 0, approved.stderr
    # the script (module __main__), then a worker that loads examples.refund_chain
    assert shell.python("refund_chain.py", "--execution-id", "w-1").returncode == 0
    recorded = shell.tether("resume", "w-1", "--set", "approved=true", "--by", "alice")
    assert "decided" in shell.tether("executions").stdout and recorded.returncode == 0
    with subprocess.Popen([TETHER, "--backend", backend, "worker", "--app", "examples.refund_chain:runners",
                           "--poll-interval", "0.2"], cwd=tmp_path, env=shell.env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True) as worker:
        assert worker.stdout is not None
        for line in worker.stdout:  # it logs each run it carries out
            shell.said.append(line)
            if "ran w-1: completed" in line:
                break
        worker.terminate()
        shell.said.append(worker.communicate(timeout=60)[0])
    assert shell.count("paging a manager about $50,000") == 2  # once per execution, not once per process
    shown = json.loads(shell.tether("show", "w-1", "--json").stdout)
    assert shown["execution"]["status"] == "completed"


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_planner_refusal_ends_with_an_answer_that_agrees_with_the_journal(tmp_path: Path, backend: str) -> None:
    shell = OperatorShell(tmp_path, backend)
    assert shell.python("planner_supervisor.py").returncode == 0
    refused = shell.python("planner_supervisor.py", "--reject")
    assert refused.returncode == 0, refused.stderr
    assert "completed: Order R-7: $42,000 for ACME. Refund: R-7: refund refused by the manager." in refused.stdout
    assert "refunding" not in refused.stdout and "refunded" not in refused.stdout
    journal = json.loads(shell.tether("show", "job-42", "--json").stdout)["journal"]
    [decision] = [e for e in journal if e["kind"] == "resumed"]
    assert decision["payload"]["value"]["approved"] is False


def test_the_example_test_file_passes_as_a_user_would_run_it(postgres_dsn: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--tether", "-o", "tether_postgres=required", "-p", "no:cacheprovider",
         "-n", "0", "-q", str(EXAMPLES / "test_refund_chain.py")],
        capture_output=True, text=True, timeout=300, check=False, cwd=EXAMPLES,
        env={**os.environ, "TETHER_TEST_POSTGRES_DSN": postgres_dsn},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "18 passed" in done.stdout  # 3 tests x 2 backends x 3 stores, none skipped


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_the_refund_versions_story(tmp_path: Path, backend: str, kind: str, request: pytest.FixtureRequest) -> None:
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'versions.db'}"
    else:
        url = f"{request.getfixturevalue('postgres_dsn')}?schema={request.getfixturevalue('pg_schema')}"
    done = subprocess.run([sys.executable, str(EXAMPLES / "refund_versions.py"), "--store", url,
                           "--backend", backend], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "1. refund-old paused on version 1 at chain:refund/node:approve" in lines
    assert any(line.startswith("2. deployed version 2") and "node:sign_off" in line for line in lines)
    refusal = lines[lines.index("3. version 2 alone refuses refund-old:") + 1]
    assert "node 'approve'" in refusal and "Nothing was claimed" in refusal
    assert "5. migrated: refund-old is on version 2" in lines
    outputs = {line.split()[1]: json.loads(line.split(": ", 1)[1]) for line in lines if line.startswith("6. ")}
    assert outputs["refund-old"]["finance_told"] is False and outputs["refund-new"]["finance_told"] is True
    assert done.stdout.count("(finance told about $800)") == 1  # @idempotent: not again on the resume
    shown = subprocess.run([str(Path(sys.executable).parent / "tether"), "show", "refund-old", "--store", url],
                           capture_output=True, text=True, timeout=60, check=False)
    assert "version 2" in shown.stdout and "migrated" in shown.stdout


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_streaming_example_is_watched_from_another_process_as_its_docstring_shows(
    tmp_path: Path, backend: str
) -> None:
    shell = OperatorShell(tmp_path, backend)
    first = shell.python("streaming_refunds.py")
    assert first.returncode == 0, first.stderr
    rows = [line.split() for line in first.stdout.splitlines() if line[:4].strip().isdigit()]
    assert [int(row[0]) for row in rows] == list(range(1, len(rows) + 1))
    assert rows[-1][1] == "execution_paused" and "--approve" in first.stdout
    # tether watch in another process, from the beginning, through the pause to the end.
    with subprocess.Popen([TETHER, "--backend", backend, "watch", "refund-stream-1", "--through-pauses", "--json"],
                          cwd=tmp_path, env=shell.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as watcher:
        assert watcher.stdout is not None
        seen = []
        for line in watcher.stdout:  # until it has caught up with the pause
            seen.append(read_event(line))
            if seen[-1].type == "execution_paused":
                break
        second = shell.python("streaming_refunds.py", "--approve")
        assert second.returncode == 0, second.stderr
        seen += [read_event(line) for line in watcher.stdout]
        assert watcher.wait(timeout=60) == 0
    assert "shows on their statement within five working days." in second.stdout  # its tokens, streamed
    assert [e.cursor for e in seen] == list(range(1, len(seen) + 1))  # no live event crosses processes
    assert seen[-1].type == "execution_completed"
    assert {"execution_resumed", "tool_result", "llm_turn"} <= {e.type for e in seen}


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_live_order_waits_for_a_message_and_is_cancelled_from_another_process(
    tmp_path: Path, backend: str
) -> None:
    shell = OperatorShell(tmp_path, backend)
    first = shell.python("live_orders.py")
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[0] == "reserved 2 x kettle"
    assert "waiting for the customer" in first.stdout
    wrong = shell.tether("send", "order-1", "--set", "confirmed=perhaps", "--app", "examples.live_orders:runners")
    assert wrong.returncode == 2 and "nothing was sent" in wrong.stderr
    [hint] = [line.strip() for line in first.stdout.splitlines() if line.strip().startswith("tether send")]
    sent = shell.tether(*shlex.split(hint)[1:])  # the command the example printed, as printed
    assert sent.returncode == 0, sent.stderr
    with subprocess.Popen([sys.executable, str(EXAMPLES / "live_orders.py"), "--backend", backend, "--continue"],
                          cwd=tmp_path, env=shell.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as shipping:
        assert shipping.stdout is not None
        assert shipping.stdout.readline().startswith("shipping")
        cancelled = shell.tether("cancel", "order-1", "--reason", "changed mind")
        out, err = shipping.communicate(timeout=60)
    assert cancelled.returncode == 0, cancelled.stderr
    assert shipping.returncode == 0, err
    assert out.strip() == "cancelled: Cancelled by " + _cli_user() + ": changed mind"
    assert "reserved" not in out  # the stock was reserved once, by the first run
    shown = shell.tether("show", "order-1")
    assert "cancelled" in shown.stdout


def _cli_user() -> str:
    import getpass

    return f"cli:{getpass.getuser()}"


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_operator_console_check(tmp_path: Path, store: str, backend: str, request: pytest.FixtureRequest) -> None:
    url = (f"sqlite:///{tmp_path / 'console.db'}" if store == "sqlite" else
           f"{request.getfixturevalue('postgres_dsn')}?schema={request.getfixturevalue('pg_schema')}")
    done = subprocess.run([sys.executable, str(EXAMPLES / "operator_console.py"), "--check", "--store", url,
                           "--backend", backend], capture_output=True, text=True, timeout=120, check=False,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert f"{PATH}: 202 Decision recorded; this server continues the run." in lines
    refused = next(line for line in lines if line.startswith("chain:refund/node:approve: "))
    assert refused.startswith("chain:refund/node:approve: 403 ") and "only under supervisor:planner/" in refused
    assert any(line.startswith("  decided by api:support-") for line in lines)
