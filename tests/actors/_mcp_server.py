"""A small MCP server (written with the mcp package) that the MCPTools tests start as a real process.

Usage:
    python _mcp_server.py CALLS_FILE            # over stdin/stdout
    python _mcp_server.py CALLS_FILE --http     # streamable HTTP on a free localhost port

Every call a tool gets is appended to CALLS_FILE as ``<tool> <key>`` before the
tool does anything else, and a server started over stdio writes ``started
<pid>`` there first: the tests count calls and sessions across processes from
the file, never from the store. Over HTTP the server prints ``port <N>`` once it
is listening (the socket is bound and listening before the line is printed).
"""

from __future__ import annotations

import os
import socket
import sys
from collections import Counter
from pathlib import Path

import anyio
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

CALLS = Path(sys.argv[1])
server = MCPServer("tether-test", log_level="WARNING")


def record(tool: str, key: str = "-") -> int:
    """Append one call to the calls file; how many calls of ``tool`` with ``key`` it holds now."""
    line = f"{tool} {key}"
    with CALLS.open("a") as calls:
        calls.write(line + "\n")
    return Counter(CALLS.read_text().splitlines())[line]


@server.tool()
def add(a: int, b: int) -> int:
    """Add two whole numbers."""
    record("add", f"{a}+{b}")
    return a + b


@server.tool(name="note")
def note_tool(key: str) -> str:
    """Write down a key, and say so."""
    record("note", key)
    return f"noted {key}"


@server.tool()
async def hold(key: str) -> str:
    """Write down a key; the first call with a key then waits (a crash test kills its client there)."""
    if record("hold", key) == 1:
        await anyio.sleep(30)
    return f"held {key}"


@server.tool()
def fail(reason: str) -> str:
    """Always fails, with the reason given."""
    record("fail", reason)
    raise ToolError(f"refused: {reason}")


@server.tool()
def flaky(key: str) -> str:
    """Fails the first time it is called with a key, then works."""
    if record("flaky", key) == 1:
        raise ToolError("busy, try again")
    return f"done {key}"


@server.tool()
async def sleepy(seconds: float) -> str:
    """Sleep, then answer."""
    record("sleepy", str(seconds))
    await anyio.sleep(seconds)
    return "awake"


@server.tool(name="files.read")
def files_read(path: str) -> str:
    """A name with a dot, which an LLM's tool name cannot have."""
    record("files.read", path)
    return f"contents of {path}"


@server.tool(structured_output=False)
def snapshot(key: str) -> list[object]:
    """Answer with a text block and an image block."""
    record("snapshot", key)
    return [f"snapshot {key}", Image(data=b"\x89PNG fake image", format="png")]


@server.tool()
def crash(key: str) -> str:
    """Kill the server's own process: the call never gets an answer."""
    record("crash", key)
    os._exit(3)


@server.tool()
def tenant(ctx: Context) -> str:
    """The X-Tenant header of the HTTP request (over stdio: none)."""
    record("tenant")
    headers = ctx.headers or {}
    return f"tenant {headers.get('x-tenant', 'none')}"


async def serve_http() -> None:
    import uvicorn

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    print(f"port {listener.getsockname()[1]}", flush=True)
    config = uvicorn.Config(server.streamable_http_app(host="127.0.0.1"), log_level="warning")
    await uvicorn.Server(config).serve(sockets=[listener])


if __name__ == "__main__":
    if "--http" in sys.argv:
        anyio.run(serve_http)
    else:
        record("started", str(os.getpid()))
        server.run()
