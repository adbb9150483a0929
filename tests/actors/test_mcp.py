"""MCPTools: the tools of a real MCP server (tests/actors/_mcp_server.py) as durable agent tools.

The server runs as a real process: started by the agent over stdio, or once per
module over streamable HTTP. It appends each call it gets to a calls file,
which is how these tests count what reached it, across processes and crashes.
Every async test runs under asyncio and trio, on SQLite and Postgres.

Run as ``python -m tests.actors.test_mcp STORE_URL BACKEND SCENARIO MODE EXECUTION_ID [SCHEMA]``,
this module is the child process a crash test kills (see _child.py).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import pytest
from anyio.streams.text import TextReceiveStream
from tether.actors import (
    Agent,
    AssistantMessage,
    MCPTools,
    Message,
    ScriptedLLM,
    Supervisor,
    ToolCall,
    ToolMessage,
    Worker,
)
from tether.runtime import Resume, RetryPolicy, interrupt
from tether.stores import ConfigurationError, Store

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from ._crash import Scenario

SERVER = Path(__file__).with_name("_mcp_server.py")
ROOT = Path(__file__).parents[2]


# -- the server, and what it was asked ----------------------------------------------


class HTTPServer:
    def __init__(self, url: str, calls: Path) -> None:
        self.url, self.calls = url, calls


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HTTPServer]:
    """One server over streamable HTTP for the module: tests tell their calls apart by their keys."""
    calls = tmp_path_factory.mktemp("mcp") / "calls.txt"
    calls.touch()
    with subprocess.Popen([sys.executable, str(SERVER), str(calls), "--http"], stdout=subprocess.PIPE,
                          text=True) as proc:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # printed once the socket listens; pytest's timeout bounds the wait
        assert line.startswith("port "), line
        try:
            yield HTTPServer(f"http://127.0.0.1:{int(line.split()[1])}/mcp", calls)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()


def calls_in(calls: Path) -> Counter[str]:
    return Counter(calls.read_text().splitlines()) if calls.exists() else Counter()


def stdio(calls: Path, **options: Any) -> MCPTools:
    return MCPTools.stdio(sys.executable, [str(SERVER), str(calls)], **options)


def key() -> str:
    return uuid.uuid4().hex[:10]


def tool_messages(messages: Sequence[Message]) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}


async def journaled(store: Store, execution_id: str) -> dict[str, Any]:
    """Each turn:N and turn:N/tool:X entry's recorded result (the assistant message, the tool message)."""
    return {e.label: e.payload["result"] for e in await store.read_journal(execution_id) if e.label.startswith("turn:")}


# -- listing and calling ------------------------------------------------------------


async def test_an_agent_lists_and_calls_the_tools_of_a_stdio_server(db_store: Store, tmp_path: Path) -> None:
    calls = tmp_path / "calls.txt"

    def double(n: int) -> int:
        """Double a number."""
        return 2 * n

    llm = ScriptedLLM([ToolCall("add", {"a": 2, "b": 3}), ToolCall("crash", {"key": "k"}),
                       ToolCall("add", {"a": 1, "b": 1}), "The sum is 5."])
    agent = Agent(name="calc", llm=llm, tools=[double, stdio(calls, exclude=["hold"])], store=db_store)
    result = await agent.run("What is 2 + 3?", execution_id="sum")
    assert result.status == "completed", result.error
    assert result.output == "The sum is 5."

    offered = {spec.name: spec for spec in llm.requests[0].tools}
    # The agent's own tools first, then the server's, in its order; names the LLM cannot take are mapped.
    assert list(offered) == ["double", "add", "note", "fail", "flaky", "sleepy", "files_read", "snapshot", "crash",
                             "tenant"]
    assert offered["add"].description == "Add two whole numbers."
    assert offered["add"].parameters["properties"] == {"a": {"title": "A", "type": "integer"},
                                                       "b": {"title": "B", "type": "integer"}}
    assert offered["add"].parameters["required"] == ["a", "b"]

    # The call is a tool call like any other: its result is the journal's turn:1/tool:add.
    entries = await journaled(db_store, "sum")
    assert list(entries) == ["turn:1", "turn:1/tool:add", "turn:2", "turn:2/tool:crash", "turn:3",
                             "turn:3/tool:add", "turn:4"]
    assert entries["turn:1/tool:add"]["content"] == "5"
    assert entries["turn:1/tool:add"]["is_error"] is False
    # A server that died is a tool error, for its call and for the later ones of the run.
    for label in ("turn:2/tool:crash", "turn:3/tool:add"):
        assert (entries[label]["content"], entries[label]["is_error"]) == ("MCPError: Connection closed", True)

    seen = calls_in(calls)
    assert (seen["add 2+3"], seen["crash k"], seen["add 1+1"]) == (1, 1, 0)
    [started] = [line for line in seen if line.startswith("started ")]
    # One server process for the run, and it is gone once the run has returned.
    with pytest.raises(ProcessLookupError):
        os.kill(int(started.split()[1]), 0)

    # Running the id again returns what it came to: no server, no call.
    again = await agent.run("What is 2 + 3?", execution_id="sum")
    assert again.output == "The sum is 5."
    assert calls_in(calls) == seen


async def test_an_http_server_with_headers_a_prefix_and_include(db_store: Store, http_server: HTTPServer) -> None:
    k = key()
    tools = MCPTools.http(http_server.url, headers={"X-Tenant": "acme"}, prefix="web_", include=["tenant", "note"])
    llm = ScriptedLLM([[ToolCall("web_tenant", {}), ToolCall("web_note", {"key": k})], "Noted."])
    agent = Agent(name="web", llm=llm, tools=[tools], store=db_store)
    # Names given with include= are part of the agent's definition before any server is opened.
    assert agent.shape() == {"tool:web_note": None, "tool:web_tenant": None}

    result = await agent.run("Note it.", execution_id="web")
    assert result.status == "completed", result.error
    assert llm.requests[0].tool_names == ["web_note", "web_tenant"]
    answers = tool_messages(llm.requests[1].messages)
    assert answers["call_1_1"].content == "tenant acme"
    assert answers["call_1_2"].content == f"noted {k}"
    assert calls_in(http_server.calls)[f"note {k}"] == 1


async def test_what_the_llm_reads_back(db_store: Store, http_server: HTTPServer) -> None:
    k = key()
    llm = ScriptedLLM([[
        ToolCall("fail", {"reason": k}),            # the server's error result
        ToolCall("files_read", {"path": k}),        # a name the LLM sees with '_' for '.'
        ToolCall("snapshot", {"key": k}),           # text and an image
        ToolCall("add", {"a": "many", "b": 1}),     # arguments the server's schema refuses
        ToolCall("add", f"not json {k}"),           # arguments that are no JSON object: nothing is sent
        ToolCall("no_such_tool", {}),
    ], "I see."])
    agent = Agent(name="reader", llm=llm, tools=[MCPTools.http(http_server.url)], store=db_store)
    result = await agent.run("Try them all.", execution_id="reader")
    assert result.status == "completed", result.error

    answers = tool_messages(llm.requests[1].messages)
    assert answers["call_1_1"].is_error
    assert answers["call_1_1"].content.startswith("MCPToolError: ")
    assert f"refused: {k}" in answers["call_1_1"].content
    assert (answers["call_1_2"].content, answers["call_1_2"].is_error) == (f"contents of {k}", False)
    assert answers["call_1_3"].content == f"snapshot {k}\n[image: image/png, 15 bytes]"
    assert answers["call_1_4"].is_error and "validation error" in answers["call_1_4"].content
    assert answers["call_1_5"].is_error and "not a JSON object" in answers["call_1_5"].content
    assert answers["call_1_6"].is_error
    assert answers["call_1_6"].content.startswith("There is no tool named 'no_such_tool'; the tools are: add, ")

    # The error results are journaled as the calls' outcomes, as FunctionTool errors are.
    entries = await journaled(db_store, "reader")
    assert entries["turn:1/tool:fail"]["is_error"] is True
    seen = calls_in(http_server.calls)
    assert (seen[f"fail {k}"], seen[f"files.read {k}"], seen[f"snapshot {k}"]) == (1, 1, 1)
    assert not any(k in line and line.startswith("add") for line in seen)


async def test_a_supervisor_worker_with_mcp_tools(db_store: Store, http_server: HTTPServer) -> None:
    k = key()
    clerk = Agent(name="clerk", llm=ScriptedLLM([ToolCall("note", {"key": k}), f"Noted {k}."]),
                  tools=[MCPTools.http(http_server.url, include=["note"])])
    boss = Supervisor("office", llm=ScriptedLLM([ToolCall("delegate_to_clerk", {"task": "Note it."}), "Done."]),
                      workers=[Worker(clerk, "clerk")], store=db_store)
    result = await boss.run("Get it noted.", execution_id="office")
    assert result.status == "completed", result.error
    labels = [e.label for e in await db_store.read_journal("office")]
    assert "turn:1/tool:note" in labels  # the worker's call, in the worker's journal
    assert calls_in(http_server.calls)[f"note {k}"] == 1


# -- approvals, pauses and resumes --------------------------------------------------


def approve(tool: str, arguments: dict[str, Any]) -> bool:
    """Calls whose key starts with "gated" wait for a person."""
    if not str(arguments.get("key", "")).startswith("gated"):
        return True
    return bool(interrupt("approve_mcp_call", {"tool": tool, **arguments}).approved)


async def test_an_approval_gate_pauses_before_the_call(db_store: Store, http_server: HTTPServer) -> None:
    free, gated = key(), f"gated-{key()}"
    llm = ScriptedLLM([[ToolCall("note", {"key": free}), ToolCall("note", {"key": gated})], "Both noted."])
    agent = Agent(name="gate", llm=llm, tools=[MCPTools.http(http_server.url, include=["note"], approve=approve)],
                  store=db_store)

    paused = await agent.run("Note both.", execution_id="gate-1")
    assert paused.status == "paused"
    assert paused.pending_interrupt is not None
    assert paused.pending_interrupt.agent_path == "agent:gate/tool:note[1]"
    assert paused.pending_interrupt.context == {"tool": "note", "key": gated}
    # The sibling's call went out and was journaled; the gated one was not sent.
    assert (calls_in(http_server.calls)[f"note {free}"], calls_in(http_server.calls)[f"note {gated}"]) == (1, 0)

    done = await agent.resume("gate-1", Resume(approved=True))
    assert done.status == "completed", done.error
    assert llm.calls == 2  # turn 1 was not asked again
    # The approved call was sent once; the journaled sibling was not sent again.
    assert (calls_in(http_server.calls)[f"note {free}"], calls_in(http_server.calls)[f"note {gated}"]) == (1, 1)
    assert tool_messages(llm.requests[1].messages)["call_1_2"].content == f"noted {gated}"

    refused = f"gated-{key()}"
    llm2 = ScriptedLLM([ToolCall("note", {"key": refused}), "Not noted."])
    agent2 = Agent(name="gate", llm=llm2, tools=[MCPTools.http(http_server.url, include=["note"], approve=approve)],
                   store=db_store)
    assert (await agent2.run("Note it.", execution_id="gate-2")).status == "paused"
    done = await agent2.resume("gate-2", Resume(approved=False))
    assert done.status == "completed", done.error
    told = tool_messages(llm2.requests[-1].messages)["call_1_1"]
    assert told.is_error
    assert told.content == "CallNotApproved: The call of note was not approved, so it was not made."
    assert calls_in(http_server.calls)[f"note {refused}"] == 0


async def test_a_timeout_and_a_retry(db_store: Store, http_server: HTTPServer) -> None:
    k = key()
    sleepy = MCPTools.http(http_server.url, include=["sleepy"], timeout=0.2)  # sleepy sleeps 30 s: a bound
    flaky = MCPTools.http(http_server.url, include=["flaky"], retry=RetryPolicy(max_attempts=2, initial=0.05,
                                                                                jitter=0))
    llm = ScriptedLLM([[ToolCall("sleepy", {"seconds": 30}), ToolCall("flaky", {"key": k})], "Done."])
    agent = Agent(name="patient", llm=llm, tools=[sleepy, flaky], store=db_store)
    result = await agent.run("Go.", execution_id="patient")
    assert result.status == "completed", result.error

    answers = tool_messages(llm.requests[-1].messages)
    assert answers["call_1_1"].is_error
    assert answers["call_1_1"].content.startswith("StepTimeout: ")
    assert answers["call_1_2"].content == f"done {k}"
    seen = calls_in(http_server.calls)
    # The retry was a fresh handling of the run, with a session of its own: the journaled
    # timeout of the sibling was read back, not sent again.
    assert seen[f"flaky {k}"] == 2
    assert llm.calls == 2


# -- a crash ------------------------------------------------------------------------


CRASH_SCRIPT = [ToolCall("note", {"key": "K1"}), ToolCall("hold", {"key": "K2"}), "All done."]


def crash_agent(keys: dict[str, str], store: Store, url: str) -> tuple[Agent, ScriptedLLM]:
    """The agent a crash test kills in a child process, and continues in the test's."""

    def script(messages: list[Message]) -> Any:
        turn = CRASH_SCRIPT[sum(1 for m in messages if isinstance(m, AssistantMessage))]
        if isinstance(turn, ToolCall):
            return ToolCall(turn.name, {"key": keys[turn.arguments["key"]]})  # type: ignore[index]
        return turn

    llm = ScriptedLLM(script)
    return Agent(name="crashy", llm=llm, tools=[MCPTools.http(url, include=["note", "hold"])], store=store,
                 lease_seconds=60), llm


@pytest.fixture(params=["sqlite", "postgres"])
def crash_store(request: pytest.FixtureRequest, tmp_path: Path, anyio_backend: str) -> Scenario:
    from ._crash import make_scenario

    return make_scenario(Path(__file__), request, tmp_path, anyio_backend)


# Each backend crashes once and each store once in the default run; the other two pairs run with -m slow.
# (Each crash costs a child process that imports the mcp package; the MCP-specific part, a journaled call
# not sent again and an in-flight one sent again, does not depend on the store, whose takeover of a dead
# owner's lease the crash tests of tests/actors and tests/runtime cover on both backends.)
CRASH_RUNS = [
    pytest.param("asyncio", "postgres", id="asyncio-postgres"),
    pytest.param("trio", "sqlite", id="trio-sqlite"),
    pytest.param("asyncio", "sqlite", id="asyncio-sqlite", marks=pytest.mark.slow),
    pytest.param("trio", "postgres", id="trio-postgres", marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("anyio_backend", "crash_store"), CRASH_RUNS, indirect=["crash_store"])
async def test_a_crash_after_one_call_was_journaled_and_during_another(
    crash_store: Scenario, http_server: HTTPServer, anyio_backend: str
) -> None:
    keys = {"K1": key(), "K2": key()}
    command = [sys.executable, "-m", "tests.actors.test_mcp", crash_store.url, anyio_backend, "crashy", "run",
               "crash-1", *crash_store.extra]
    env = {**os.environ, "MCP_TEST_URL": http_server.url, "MCP_TEST_KEYS": json.dumps(keys)}
    with anyio.fail_after(60):
        async with await anyio.open_process(command, cwd=ROOT, env=env, stderr=None) as child:
            assert child.stdout is not None
            # Wait for the journal write of the first call, on the child's stdout...
            said = ""
            async for chunk in TextReceiveStream(child.stdout):
                said += chunk
                if "recorded turn:1/tool:note\n" in said:
                    break
            # ...then for the server to have the second call, which it holds.
            while calls_in(http_server.calls)[f"hold {keys['K2']}"] == 0:
                await anyio.sleep(0.05)
            child.send_signal(signal.SIGKILL)
            await child.wait()
    assert child.returncode == -signal.SIGKILL

    async with crash_store.store() as store:
        agent, llm = crash_agent(keys, store, http_server.url)
        done = await agent.resume("crash-1")  # a fresh process's recovery: the dead owner's lease is taken over
    assert done.status == "completed", done.error
    assert done.output == "All done."
    assert llm.calls == 1  # only turn 3: turns 1 and 2 were journaled
    seen = calls_in(http_server.calls)
    assert seen[f"note {keys['K1']}"] == 1  # journaled before the crash: not sent again
    assert seen[f"hold {keys['K2']}"] == 2  # in flight at the crash: sent again by the recovery


# -- what cannot work ---------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_a_server_that_cannot_start() -> None:
    with pytest.raises(ConfigurationError, match=r"Cannot open the MCP server `/nonexistent/mcp-server` \(stdio\): "
                                                 r"FileNotFoundError"):
        async with MCPTools.stdio("/nonexistent/mcp-server").open():
            pass
    dies = MCPTools.stdio(sys.executable, ["-c", "import sys; sys.exit(3)"])
    with pytest.raises(ConfigurationError, match=r"Cannot open the MCP server .*Connection closed"):
        async with dies.open():
            pass
    # It never answers: the bound is how long the test waits, not a guess at how long it takes.
    silent = MCPTools.stdio(sys.executable, ["-c", "import sys; sys.stdin.read()"], open_timeout=0.2)
    with pytest.raises(ConfigurationError, match=r"did not answer within open_timeout=0.2 s"):
        async with silent.open():
            pass
    with pytest.raises(ConfigurationError, match=r"Cannot open the MCP server http://127\.0\.0\.1:\d+/mcp: "):
        async with MCPTools.http(f"http://127.0.0.1:{free_port()}/mcp").open():
            pass


async def test_a_run_whose_server_cannot_start_fails_before_the_llm_is_asked(db_store: Store) -> None:
    dies = MCPTools.stdio(sys.executable, ["-c", "import sys; sys.exit(3)"])
    llm = ScriptedLLM(["never"])
    result = await Agent(name="broken", llm=llm, tools=[dies], store=db_store).run("Hi.", execution_id="broken")
    assert result.status == "failed"
    assert result.error is not None and "Cannot open the MCP server" in result.error
    assert llm.calls == 0


async def test_names_that_do_not_fit(http_server: HTTPServer) -> None:
    with pytest.raises(ConfigurationError, match=r"names 'nope', which the MCP server .* does not offer; "
                                                 r"it offers: add, crash, fail, .*"):
        async with MCPTools.http(http_server.url, include=["add", "nope"]).open():
            pass

    # Exceptions raised while the tools are open come out as they are, not in a group.
    listed: list[str] = []

    async def list_then_fail() -> None:
        async with MCPTools.http(http_server.url, include=["note"]).open() as tools:
            listed.extend(tool.spec.name for tool in tools)
            raise KeyError("inside")

    with pytest.raises(KeyError, match="inside"):
        await list_then_fail()
    assert listed == ["note"]


async def test_a_name_the_agent_has_too_fails_the_run(db_store: Store, http_server: HTTPServer) -> None:
    def note(key: str) -> str:
        return key

    llm = ScriptedLLM(["never"])
    agent = Agent(name="clash", llm=llm, tools=[note, MCPTools.http(http_server.url)], store=db_store)
    result = await agent.run("Hi.", execution_id="clash")
    assert result.status == "failed"
    assert result.error is not None and "offers a tool named 'note', and the agent has one" in result.error
    assert llm.calls == 0


@pytest.mark.parametrize(("build", "says"), [
    (lambda: MCPTools.stdio(""), "give the program"),
    (lambda: MCPTools.stdio("python", "server.py"), "list of strings"),  # type: ignore[arg-type]
    (lambda: MCPTools.stdio("python", include="search"), "list of strings"),
    (lambda: MCPTools.stdio("python", prefix="my tools"), "prefix"),
    (lambda: MCPTools.stdio("python", include=["x" * 65]), "not 1-64 letters"),
    (lambda: MCPTools.stdio("python", timeout=0), "positive number"),
    (lambda: MCPTools.stdio("python", timeout=5, shielded=True), "Drop one of them"),
    (lambda: MCPTools.stdio("python", retry=3), "RetryPolicy"),  # type: ignore[arg-type]
    (lambda: MCPTools.stdio("python", approve="yes"), "give a function"),  # type: ignore[arg-type]
    (lambda: MCPTools.stdio("python", open_timeout=0), "positive number"),
    (lambda: MCPTools.http("localhost:8000/mcp"), "http:// or https://"),
    (lambda: MCPTools.http("ftp://example.com/mcp"), "http:// or https://"),
])
def test_bad_options_are_refused_when_built(build: Any, says: str) -> None:
    with pytest.raises(ConfigurationError, match=says):
        build()


def test_without_the_mcp_package() -> None:
    program = (
        "import sys\n"
        "sys.modules['mcp'] = None  # as if it were not installed\n"
        "from tether.actors import MCPTools\n"
        "try:\n"
        "    MCPTools.stdio('python', ['server.py'])\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.startswith("ConfigurationError MCPTools needs the mcp package")
    assert "pip install 'tether[mcp]'" in done.stdout


# -- the crash test's child process -------------------------------------------------


def _child(scenario: str, store: Store) -> tuple[Agent, Any]:
    agent, llm = crash_agent(json.loads(os.environ["MCP_TEST_KEYS"]), store, os.environ["MCP_TEST_URL"])
    return agent, lambda: {"llm_calls": llm.calls}


if __name__ == "__main__":
    from ._child import run_child

    run_child(_child, "Note, then hold.")
