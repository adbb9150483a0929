"""tether.actors.compat: the durability documentation's programs run with their imports changed.

Each program's first call is made as its users make it, blocking, in a script of
its own (``python _compat_programs.py ...``); the pause is then seen by ``tether
list-pending`` and resumed from this process, on asyncio and trio, SQLite and
Postgres. The script's blocking calls run on an event loop of their own (the
same whichever backend resumes), so one script per database and test process
makes every first call the tests resume: one for each program and backend, each
with an execution id of its own (see `first_calls`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import pytest
from tether.actors import ScriptedLLM
from tether.actors.compat import (
    Agent,
    AlreadyResumed,
    Chain,
    FunctionTool,
    Interrupt,
    Result,
    Resume,
    SQLiteCheckpointer,
)
from tether.runtime import UsageError
from tether.runtime.ops._cli import main as tether_main
from tether.stores import ConfigurationError, PostgresStore, SQLiteStore, open_store

from . import _compat_programs as programs

if TYPE_CHECKING:
    from collections.abc import Callable

    FirstCallsOf = Callable[[str, pytest.FixtureRequest], "FirstCalls"]

PROGRAMS = Path(programs.__file__)

PATHS = {
    "agent": "agent:refund-bot/tool:approve_refund",
    "swarm": "swarm:content_team/agent:analyst/tool:approve_publish",
    "supervisor": "supervisor:planner/worker:auditor/tool:approve_refund",
    "chain": "chain:refund/node:approve",
}
BUILDERS = {
    "agent": programs.refund_agent,
    "swarm": programs.content_swarm,
    "supervisor": programs.planner_supervisor,
    "chain": programs.refund_chain,
}
OUTPUTS = {
    "agent": "Refund processed.",
    "swarm": "Report: the findings, approved for publishing.",
    "supervisor": "Investigated and reported.",
}


BACKENDS = ("asyncio", "trio")
FIRST_CALLS = [
    *((program, f"{program}-{backend}") for program in PATHS for backend in BACKENDS),
    *(("agent", f"job-{backend}") for backend in BACKENDS),    # two resumers race for each
    *(("five", f"crash-{backend}") for backend in BACKENDS),   # killed in n3, in a child forked for it
    ("agent", "cli-job"),                                      # resumed by the tether command
]


@dataclass
class FirstCalls:
    """A database, as the script is told it (a SQLite file, or a DSN and a schema), and what the script did."""

    args: list[str]
    printed: dict[str, dict[str, Any]]
    """Each first call's line of JSON, by its execution id."""
    logs: Path
    """Where the five calls logged their nodes (one file per execution id)."""

    @property
    def url(self) -> str:
        return f"sqlite:///{self.args[0]}" if len(self.args) == 1 else f"{self.args[0]}?schema={self.args[1]}"

    def log(self, execution_id: str) -> Path:
        return self.logs / f"{execution_id}.log"


def script(database: list[str], logs: Path) -> dict[str, dict[str, Any]]:
    """Every first call of FIRST_CALLS, in one process of their own; what it printed, by execution id."""
    calls = [arg for program, execution_id in FIRST_CALLS for arg in ("--call", program, execution_id)]
    done = subprocess.run([sys.executable, str(PROGRAMS), *database, "--logs", str(logs), *calls],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    printed = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["execution_id"] for line in printed] == [execution_id for _, execution_id in FIRST_CALLS]
    return {line["execution_id"]: line for line in printed}


@pytest.fixture(scope="module")
def first_calls(tmp_path_factory: pytest.TempPathFactory) -> FirstCallsOf:
    """The script's run on a database of a kind ("sqlite", "postgres"): made once, when a test first needs it."""
    made: dict[str, FirstCalls] = {}

    def of(kind: str, request: pytest.FixtureRequest) -> FirstCalls:
        if kind not in made:
            folder = tmp_path_factory.mktemp(f"compat-{kind}")
            database = [str(folder / "tether.db")] if kind == "sqlite" else \
                [request.getfixturevalue("postgres_dsn"), f"t_{uuid.uuid4().hex[:12]}"]
            made[kind] = FirstCalls(database, script(database, folder), folder)
        return made[kind]

    return of


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, first_calls: FirstCallsOf) -> FirstCalls:
    """The programs' database, on which the script has made every first call."""
    return first_calls(request.param, request)


@pytest.mark.parametrize("program", list(PATHS))
async def test_program_pauses_in_its_script_and_resumes_in_another_process(
    program: str, database: FirstCalls, anyio_backend: str, capsys: pytest.CaptureFixture[str],
) -> None:
    execution_id = f"{program}-{anyio_backend}"
    paused = database.printed[execution_id]
    assert paused == {"execution_id": execution_id, "status": "paused", "agent_path": PATHS[program],
                      "attribute": PATHS[program], "node_id": "approve" if program == "chain" else None}

    # What an operator's cron line (fastaiagent list-pending) now types.
    command = ["list-pending", "--json", "--store", database.url]
    assert await anyio.to_thread.run_sync(tether_main, command) == 0
    listed = json.loads(capsys.readouterr().out)
    rows = [(row["execution_id"], row["agent_path"]) for row in listed]
    assert [row for row in rows if row[0] == execution_id] == [(execution_id, PATHS[program])]
    # The others are pauses the script made too (which other tests may have resumed already).
    made = {(e, line["agent_path"]) for e, line in database.printed.items() if line.get("status") == "paused"}
    assert len(set(rows)) == len(rows) and set(rows) <= made

    runner = BUILDERS[program](programs.checkpointer_for(*database.args))
    result = await runner.aresume(execution_id, resume_value=Resume(approved=True, metadata={"approver": "alice"}))
    assert isinstance(result, Result)
    assert result.status == "completed"
    assert result.pending_interrupt is None
    if program == "chain":
        assert result.final_state == {"amount": 50_000, "approved": True, "charged": True}
    else:
        assert result.output == OUTPUTS[program]

    with pytest.raises(AlreadyResumed):  # the second click of Approve changes nothing
        await runner.aresume(execution_id, resume_value=Resume(approved=False))


async def test_a_second_resumer_of_a_pause_gets_already_resumed(database: FirstCalls, anyio_backend: str) -> None:
    execution_id = f"job-{anyio_backend}"
    assert database.printed[execution_id]["status"] == "paused"
    first, second = (programs.refund_agent(programs.checkpointer_for(*database.args)) for _ in range(2))
    outcomes: list[Any] = []

    async def resume(agent: Agent) -> None:
        try:
            outcomes.append(await agent.aresume(execution_id, resume_value=Resume(approved=True)))
        except AlreadyResumed as exc:
            outcomes.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(resume, first)
        tg.start_soon(resume, second)
    assert sorted(type(o).__name__ for o in outcomes) == ["AlreadyResumed", "Result"]


async def test_a_chain_killed_in_its_third_node_resumes_there(database: FirstCalls, anyio_backend: str) -> None:
    execution_id, log = f"crash-{anyio_backend}", database.log(f"crash-{anyio_backend}")
    assert database.printed[execution_id]["returncode"] == -9  # SIGKILL, in the middle of n3
    assert log.read_text().split() == ["n1", "n2", "n3"]

    chain = programs.five_nodes(programs.checkpointer_for(*database.args), log)
    result = await chain.aresume(execution_id)  # the next process's call: no decision, a recovery
    assert result.status == "completed"
    assert result.final_state == {"done": ["n1", "n2", "n3", "n4", "n5"]}
    assert log.read_text().split() == ["n1", "n2", "n3", "n3", "n4", "n5"]  # n1 and n2 were not run again


def test_blocking_calls_run_from_threads_without_a_loop(tmp_path: Path) -> None:
    """A web framework's request threads: each blocking call has an event loop of its own."""
    agent = programs.refund_agent(SQLiteCheckpointer(tmp_path / "threads.db"))
    results: dict[int, Result] = {}

    def request(n: int) -> None:
        results[n] = agent.run("Process a $50k refund.", execution_id=f"t-{n}")

    threads = [threading.Thread(target=request, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert {n: r.status for n, r in results.items()} == dict.fromkeys(range(4), "paused")
    resumed = agent.resume("t-2", resume_value=Resume(approved=True))  # blocking, no loop here
    assert (resumed.status, resumed.output) == ("completed", "Refund processed.")
    again = agent.run("Process a $50k refund.", execution_id="t-2")  # the id is an idempotency key
    assert again.status == "completed"


async def test_blocking_calls_inside_a_loop_say_what_to_await(anyio_backend: str, tmp_path: Path) -> None:
    agent = programs.refund_agent(SQLiteCheckpointer(tmp_path / "loop.db"))
    with pytest.raises(UsageError, match=r"await arun\(") as caught:
        agent.run("Process a $50k refund.", execution_id="in-loop")
    assert "running event loop" in str(caught.value)
    chain = programs.refund_chain(SQLiteCheckpointer(tmp_path / "loop.db"))
    with pytest.raises(UsageError, match=r"await aexecute\("):
        chain.execute({"amount": 5}, execution_id="in-loop")
    with pytest.raises(UsageError, match=r"await aresume\("):
        agent.resume("in-loop", resume_value=Resume(approved=True))
    async with SQLiteStore(tmp_path / "loop.db") as store:
        assert await store.get_execution("in-loop") is None  # nothing was started

    # Awaited, the same objects work; and from a worker thread (no loop there) blocking works.
    assert (await agent.arun("Process a $50k refund.", execution_id="awaited")).status == "paused"
    small = await anyio.to_thread.run_sync(lambda: chain.execute({"amount": 5}, execution_id="threaded"))
    assert small.final_state == {"amount": 5, "approved": True, "charged": True}


async def test_a_run_without_execution_id_gets_one(anyio_backend: str, tmp_path: Path) -> None:
    agent = programs.refund_agent(SQLiteCheckpointer(tmp_path / "ids.db"))
    first, second = await agent.arun("Process a $50k refund."), await agent.arun("Process a $50k refund.")
    assert first.status == second.status == "paused"
    assert first.execution_id and second.execution_id and first.execution_id != second.execution_id
    resumed = await agent.aresume(first.execution_id, resume_value=Resume(approved=False))
    assert resumed.status == "completed"


async def test_a_wrong_decision_consumes_nothing(anyio_backend: str, tmp_path: Path) -> None:
    agent = programs.refund_agent(SQLiteCheckpointer(tmp_path / "bad.db"))
    assert (await agent.arun("Process a $50k refund.", execution_id="job-9")).status == "paused"
    with pytest.raises(ValueError, match="approved"):
        await agent.aresume("job-9", resume_value={})  # says nothing of approving: refused, fail closed
    still = await agent.aresume("job-9", resume_value=Resume(approved=True))
    assert still.status == "completed"


def test_the_pending_interrupt_reads_as_a_dict_and_as_a_row(tmp_path: Path) -> None:
    chain = programs.refund_chain(SQLiteCheckpointer(tmp_path / "dict.db"))
    result = chain.execute({"amount": 50_000}, execution_id="refund-abc")
    pending = result.pending_interrupt
    assert isinstance(pending, Interrupt)
    assert {**pending} == {  # keys() and [] make it a mapping to unpack
        "reason": "manager_approval", "context": {"amount": 50_000}, "node_id": "approve",
        "agent_path": "chain:refund/node:approve",
    }
    assert pending.get("missing", "-") == "-"
    with pytest.raises(KeyError, match="agent_path"):
        pending["status"]
    assert result.pending[0].agent_path == pending.agent_path
    assert result.final_state == {}  # not ended yet


async def test_programs_run_on_postgres_through_its_checkpointer(postgres_dsn: str, pg_schema: str,
                                                                 anyio_backend: str) -> None:
    checkpointer = programs.checkpointer_for(postgres_dsn, pg_schema)
    assert isinstance(checkpointer, PostgresStore)
    assert (checkpointer.dsn, checkpointer.schema) == (postgres_dsn, pg_schema)
    result = await programs.refund_chain(checkpointer).aexecute({"amount": 50_000}, execution_id="pg-1")
    assert result.pending_interrupt is not None and result.pending_interrupt["node_id"] == "approve"
    async with open_store(f"{postgres_dsn}?schema={pg_schema}") as store:
        assert [p.agent_path for p in await store.list_pending()] == ["chain:refund/node:approve"]


def test_definitions_the_compat_path_does_not_take_are_refused(tmp_path: Path) -> None:
    chain = Chain("c", checkpointer=SQLiteCheckpointer(tmp_path / "c.db"))
    chain.add_node("a", lambda state: {})
    chain.add_node("b", lambda state: {})
    with pytest.raises(ConfigurationError, match="function of the state"):
        chain.connect("a", "b", condition="state.amount > 10")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="Supervisor or a Swarm"):
        chain.add_node("x", agent=object())
    with pytest.raises(ConfigurationError, match="one node"):
        chain.add_node("y")
    with pytest.raises(ConfigurationError, match="needs fn="):
        FunctionTool(name="approve_refund")
    with pytest.raises(ConfigurationError, match="needs llm="):
        Agent(name="no-llm")
    with pytest.raises(ConfigurationError, match="Fork it"):
        anyio.run(lambda: chain.resume("any", {"amount": 1}))


def test_an_agent_without_a_checkpointer_runs_in_memory() -> None:
    agent = Agent(name="bot", llm=ScriptedLLM(["hello"]))
    result = agent.run("hi", execution_id="m-1")
    assert (result.status, result.output) == ("completed", "hello")
    assert agent.run("hi", execution_id="m-1").output == "hello"  # still there, in this process


def test_the_tether_command_resumes_a_compat_program_by_its_app(request: pytest.FixtureRequest,
                                                               first_calls: FirstCallsOf) -> None:
    database = first_calls("sqlite", request)
    folder = Path(database.args[0]).parent  # the command's default store is ./tether.db: this one
    app = folder / "refunds_app.py"
    app.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(PROGRAMS.parent)!r})\n"
        "import _compat_programs as programs\n"
        f"agent = programs.refund_agent(programs.SQLiteCheckpointer({database.args[0]!r}))\n"
    )
    assert database.printed["cli-job"]["status"] == "paused"
    done = subprocess.run([str(Path(sys.executable).with_name("tether")), "resume", "cli-job", "--set",
                           "approved=true", "--app", "refunds_app:agent"], cwd=folder, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "completed" in done.stdout
