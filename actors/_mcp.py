"""`MCPTools`: the tools of a Model Context Protocol server, as durable tools of an agent.

```python
files = MCPTools.stdio("npx", ["-y", "@modelcontextprotocol/server-filesystem", "/srv/docs"])
agent = Agent(name="librarian", llm=llm, tools=[files], store=store)
```

An `MCPTools` is a description of a server, not a connection: building one
starts nothing. The agent's turn loop opens the server when it starts handling
a message (a run, a resume, a recovery), lists its tools, offers them to the
LLM, and closes the session when the handling ends, however it ends. So the
session has one owner, a run that pauses holds no connection while it waits,
and a run continued in another process opens a session of its own there.

Each call is a tool call like any other: its result is journaled as
``turn:N/tool:X``, so a replay reads it back and never sends it to the server
again. The ``mcp`` package is imported only when a server is opened: install
it with ``pip install 'tether[mcp]'``.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import re
import shlex
import sys
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
from pydantic import BaseModel, ConfigDict
from tether.runtime import __version__
from tether.stores import ConfigurationError

from ._messages import ToolSpec
from ._steps import attempted, step_retry, step_seconds, within
from ._tools import _NAME, FunctionTool, ToolArgumentsError

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager
    from datetime import timedelta

    from anyio.abc import TaskGroup, TaskStatus
    from mcp import Client
    from mcp.types import CallToolResult, Tool
    from tether.runtime import RetryPolicy

Approve = Callable[[str, dict[str, Any]], Any]
"""``approve(tool, arguments) -> bool``, sync or async: whether to send this call to the server."""

_INSTALL = "pip install 'tether[mcp]'"
_PAGES = 100  # tools/list pages read at most: a server whose cursor never ends cannot hang a run


class MCPToolError(Exception):
    """The server answered a call with an error result (``isError``); the LLM is told its text."""


class CallNotApproved(Exception):
    """``approve`` refused a call, which was not sent to the server; the LLM is told so."""


@dataclass(frozen=True)
class _Stdio:
    """A server this process starts, talking JSON-RPC over the child's stdin and stdout."""

    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None
    cwd: str | None = None

    def __str__(self) -> str:
        return f"`{shlex.join([self.command, *self.args])}` (stdio)"

    hint = ("Check that the command is installed and starts an MCP server on its stdin and stdout "
            "(what the server itself says is on this process's stderr).")

    def transport(self) -> AbstractAsyncContextManager[Any]:
        from mcp.client.stdio import StdioServerParameters, stdio_client

        parameters = StdioServerParameters(command=self.command, args=list(self.args),
                                           env=dict(self.env) if self.env is not None else None, cwd=self.cwd)
        return stdio_client(parameters, errlog=sys.stderr)  # the server's own log, as the process's


@dataclass(frozen=True)
class _HTTP:
    """A running server, reached over the streamable HTTP transport."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.url

    hint = "Check that the server is running and that the URL is its MCP endpoint (it often ends in /mcp)."

    @asynccontextmanager
    async def transport(self) -> AsyncIterator[Any]:
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        # The mcp package's own defaults: a server may hold a response stream open for minutes.
        timeout = httpx2.Timeout(30.0, read=300.0)
        async with (httpx2.AsyncClient(headers=dict(self.headers), timeout=timeout) as http,
                    streamable_http_client(self.url, http_client=http) as streams):
            yield streams


class MCPTools:
    """The tools of one MCP server, offered to an agent's LLM as its own tools.

    Build it with `MCPTools.stdio` (a server this process starts) or
    `MCPTools.http` (a running server, over streamable HTTP), and put it in an
    agent's ``tools=[...]`` next to its functions. Each run opens the server
    when its turns start, lists the tools (name, description, JSON schema of the
    arguments) and closes it when the handling of the run ends: completed,
    paused, failed or cancelled. Calls are journaled like every tool call's, so
    a resumed or recovered run does not send a call whose result it has.

    What the LLM reads back is the call's content, its text blocks joined (other
    blocks are described in brackets: ``[image: image/png, 2048 bytes]``), or
    the structured content as JSON when the server sent no content. An error
    result (``isError``) is told to the LLM as the tool's error, as a raised
    exception of a `FunctionTool` is.

    Args:
        server: Where the server is (made by `stdio` and `http`).
        include: The server's tools to offer, by their names on the server (default: all).
            A name the server does not offer fails the run's start.
        exclude: The server's tools not to offer.
        prefix: Put before each tool's name as the LLM sees it (``"files_"``), for two
            servers with tools of the same name. Characters of a server's tool name
            that an LLM's tool name cannot have become ``_``.
        timeout: Seconds (or a ``timedelta``) one call may take, as `FunctionTool`'s: a
            call that overruns is cancelled, and the LLM is told it timed out.
        shielded: A cancel of the run waits until a call has finished and its result is
            journaled, as `FunctionTool`'s.
        retry: A `RetryPolicy` for failed calls (an error result included), as `FunctionTool`'s.
        approve: ``approve(tool, arguments) -> bool``, sync or async, called before each
            call with the tool's name on the server: False refuses the call (the LLM
            is told it was not approved), and ``interrupt()`` inside it pauses the run
            until someone decides. Without it every call is sent.
        open_timeout: Seconds opening the server and listing its tools may take.

    Raises:
        ConfigurationError: The ``mcp`` package is not installed, or an option is not
            valid (the message says which and what to give instead).

    Example:
        ```python
        def approve(tool: str, arguments: dict) -> bool:
            if tool != "delete_file":
                return True
            return bool(interrupt("approve_delete", {"path": arguments["path"]}).approved)

        files = MCPTools.stdio("python", ["files_server.py"], prefix="files_", approve=approve)
        search = MCPTools.http("https://search.example.com/mcp", headers={"Authorization": f"Bearer {key}"},
                               include=["search"], timeout=20)
        agent = Agent(name="researcher", llm=llm, tools=[files, search, summarize], store=store)
        ```
    """

    def __init__(
        self,
        server: _Stdio | _HTTP,
        *,
        include: Iterable[str] | None = None,
        exclude: Iterable[str] = (),
        prefix: str = "",
        timeout: float | timedelta | None = None,
        shielded: bool = False,
        retry: RetryPolicy | None = None,
        approve: Approve | None = None,
        open_timeout: float = 30.0,
    ) -> None:
        _require_mcp()
        if not isinstance(server, _Stdio | _HTTP):
            raise ConfigurationError(
                f"MCPTools({server!r}): build it with MCPTools.stdio(command, args) or MCPTools.http(url)."
            )
        self.server = server
        self.include: frozenset[str] | None = _names(include, "include") if include is not None else None
        self.exclude: frozenset[str] = _names(exclude, "exclude")
        if prefix and not _NAME.fullmatch(prefix):
            raise ConfigurationError(f"prefix={prefix!r}: a tool name prefix is letters, digits, '_' or '-'.")
        self.prefix = prefix
        described = f"the tools of MCP server {server}"
        self.timeout: float | None = step_seconds(timeout, described, shielded=shielded)
        """Seconds one call may take (``None``: no limit)."""
        self.shielded = shielded
        self.retry: RetryPolicy | None = step_retry(retry, described)
        if approve is not None and not callable(approve):
            raise ConfigurationError(f"approve={approve!r}: give a function (tool, arguments) -> bool, or None.")
        self.approve = approve
        if not open_timeout > 0:
            raise ConfigurationError(f"open_timeout={open_timeout!r}: give a positive number of seconds.")
        self.open_timeout = float(open_timeout)
        for name in sorted(self.include or ()):
            self._llm_name(name)  # a name that cannot be offered fails here, not at a run's start

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        include: Iterable[str] | None = None,
        exclude: Iterable[str] = (),
        prefix: str = "",
        timeout: float | timedelta | None = None,
        shielded: bool = False,
        retry: RetryPolicy | None = None,
        approve: Approve | None = None,
        open_timeout: float = 30.0,
    ) -> MCPTools:
        """A server this process starts as a child, for each run, over its stdin and stdout.

        The child is stopped when the run's handling ends (its stdin closed, then,
        if it does not exit, terminated), also when the run pauses.

        Args:
            command: The program (``"python"``, ``"npx"``, a path).
            args: Its arguments.
            env: Environment variables for it. It inherits only a few of this
                process's (``PATH``, ``HOME``, ``USER``, ``SHELL``, ``TERM``,
                ``LOGNAME``), so give it what it needs, such as API keys.
            cwd: Its working directory (default: this process's).
            include: See `MCPTools`; so are the options below.
            exclude: The server's tools not to offer.
            prefix: Put before each tool's name as the LLM sees it.
            timeout: Seconds one call may take.
            shielded: A cancel waits for a call to finish and be journaled.
            retry: A `RetryPolicy` for failed calls.
            approve: ``approve(tool, arguments) -> bool``, called before each call.
            open_timeout: Seconds starting the server and listing its tools may take.

        Raises:
            ConfigurationError: ``mcp`` is not installed, the command is empty, or an option is not valid.
        """
        if not isinstance(command, str) or not command:
            raise ConfigurationError(f"MCPTools.stdio(command={command!r}): give the program that starts the server.")
        if isinstance(args, str) or not all(isinstance(arg, str) for arg in args):
            raise ConfigurationError(
                f"MCPTools.stdio(args={args!r}): give the arguments as a list of strings, e.g. [\"server.py\"]."
            )
        server = _Stdio(command, tuple(args), dict(env) if env is not None else None, str(cwd) if cwd else None)
        return cls(server, include=include, exclude=exclude, prefix=prefix, timeout=timeout, shielded=shielded,
                   retry=retry, approve=approve, open_timeout=open_timeout)

    @classmethod
    def http(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        include: Iterable[str] | None = None,
        exclude: Iterable[str] = (),
        prefix: str = "",
        timeout: float | timedelta | None = None,
        shielded: bool = False,
        retry: RetryPolicy | None = None,
        approve: Approve | None = None,
        open_timeout: float = 30.0,
    ) -> MCPTools:
        """A running server, reached at ``url`` over the streamable HTTP transport.

        Each run opens an MCP session of its own and ends it when its handling ends.

        Args:
            url: The server's MCP endpoint (``"http://127.0.0.1:8000/mcp"``).
            headers: Sent with every request (``{"Authorization": "Bearer ..."}``).
            include: See `MCPTools`; so are the options below.
            exclude: The server's tools not to offer.
            prefix: Put before each tool's name as the LLM sees it.
            timeout: Seconds one call may take.
            shielded: A cancel waits for a call to finish and be journaled.
            retry: A `RetryPolicy` for failed calls.
            approve: ``approve(tool, arguments) -> bool``, called before each call.
            open_timeout: Seconds connecting and listing the tools may take.

        Raises:
            ConfigurationError: ``mcp`` is not installed, the URL is not http(s), or an option is not valid.
        """
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigurationError(
                f"MCPTools.http(url={url!r}): give the server's http:// or https:// endpoint, "
                f"e.g. \"http://127.0.0.1:8000/mcp\"."
            )
        return cls(_HTTP(url, dict(headers or {})), include=include, exclude=exclude, prefix=prefix,
                   timeout=timeout, shielded=shielded, retry=retry, approve=approve, open_timeout=open_timeout)

    def __repr__(self) -> str:
        server = self.server
        if isinstance(server, _Stdio):
            return f"MCPTools.stdio({server.command!r}, {list(server.args)!r})"
        return f"MCPTools.http({server.url!r})"

    def names(self) -> list[str]:
        """The tool names the LLM sees that are known before the server is opened: those of ``include``."""
        return sorted(self._llm_name(name) for name in self.include or () if name not in self.exclude)

    def definition(self) -> dict[str, Any]:
        """What a journal depends on: how names are chosen, not where the server is."""
        return {"include": sorted(self.include) if self.include is not None else None,
                "exclude": sorted(self.exclude), "prefix": self.prefix}

    @asynccontextmanager
    async def open(self) -> AsyncIterator[list[FunctionTool]]:
        """Open the server and yield its tools, bound to this session, until the block ends.

        An agent does this itself for each run; open it yourself to see what the
        server offers. Exceptions raised in the block come out as they are, after
        the session is closed (never inside an exception group).

        Raises:
            ConfigurationError: The server cannot be started or reached, does not
                answer within ``open_timeout``, or does not offer a tool ``include``
                names, or offers one whose name cannot be given to an LLM.

        Example:
            ```python
            async with MCPTools.stdio("python", ["server.py"]).open() as tools:
                print([tool.spec.name for tool in tools])
            ```
        """
        closing = anyio.Event()
        failure: BaseException | None = None
        async with anyio.create_task_group() as tg:
            try:
                yield await self._started(tg, closing)
            except anyio.get_cancelled_exc_class():
                raise
            except BaseException as exc:  # noqa: BLE001 - raised again below, once the session is closed
                failure = exc
            finally:
                closing.set()
        if failure is not None:
            # Raised outside the task group, which would put it in an exception group.
            raise failure

    async def _started(self, tg: TaskGroup, closing: anyio.Event) -> list[FunctionTool]:
        """Start the task that holds the session; its tools once it has listed them."""
        with anyio.move_on_after(self.open_timeout) as waited:
            try:
                client, listed = await tg.start(self._hold, closing)
            except Exception as exc:
                raise ConfigurationError(
                    f"Cannot open the MCP server {self.server}: {_reason(exc)}. {self.server.hint}"
                ) from exc
        if waited.cancelled_caught:
            raise ConfigurationError(
                f"The MCP server {self.server} did not answer within open_timeout={self.open_timeout:g} s. "
                f"{self.server.hint} Raise open_timeout if it is slow to start."
            )
        return self._offered(client, listed)

    async def _hold(self, closing: anyio.Event, *, task_status: TaskStatus[tuple[Client, list[Tool]]]) -> None:
        """Hold the session open, in a task of its own, until ``closing`` is set.

        The session lives in this task so that its scopes are entered and left
        by one task, whichever tasks of the run send calls through it.
        """
        from mcp import Client
        from mcp.types import Implementation

        async with Client(self.server.transport(), client_info=Implementation(name="tether", version=__version__),
                          cache=None) as client:
            listed: list[Tool] = []
            cursor: str | None = None
            for _ in range(_PAGES):
                page = await client.list_tools(cursor=cursor)
                listed += page.tools
                cursor = page.next_cursor
                if cursor is None:
                    break
            task_status.started((client, listed))
            await closing.wait()

    def _offered(self, client: Client, listed: list[Tool]) -> list[FunctionTool]:
        """The listed tools ``include`` and ``exclude`` keep, named as the LLM will see them."""
        offered = {tool.name: tool for tool in listed}
        missing = sorted((self.include or set()) - offered.keys())
        if missing:
            raise ConfigurationError(
                f"MCPTools(include=...) names {', '.join(map(repr, missing))}, which the MCP server {self.server} "
                f"does not offer; it offers: {', '.join(sorted(offered)) or 'no tools'}."
            )
        tools: dict[str, _MCPTool] = {}
        for tool in listed:
            if (self.include is not None and tool.name not in self.include) or tool.name in self.exclude:
                continue
            name = self._llm_name(tool.name)
            if name in tools:
                raise ConfigurationError(
                    f"The MCP server {self.server} offers {tool.name!r} and {tools[name].remote!r}, "
                    f"which are both {name!r} as an LLM's tool name. Exclude one (exclude=[{tool.name!r}])."
                )
            tools[name] = _MCPTool(self, client, tool, name)
        return list(tools.values())

    def _llm_name(self, remote: str) -> str:
        name = self.prefix + re.sub(r"[^A-Za-z0-9_-]", "_", remote)
        if not _NAME.fullmatch(name):
            raise ConfigurationError(
                f"The MCP tool {remote!r} of {self.server} would be called {name!r}, which is not 1-64 letters, "
                f"digits, '_' or '-'. Use a shorter prefix=, or exclude=[{remote!r}]."
            )
        return name


class _AnyArguments(BaseModel):
    """The server checks a call's arguments against its own schema."""

    model_config = ConfigDict(extra="allow")


class _MCPTool(FunctionTool):
    """One tool of an open MCP session: its call is a ``tools/call`` request to the server."""

    def __init__(self, toolset: MCPTools, client: Client, listed: Tool, name: str) -> None:
        # Not FunctionTool.__init__: the function is on the server, and so is its schema.
        self.name = name
        self.remote = listed.name
        """The tool's name on the server."""
        self.fn = self._send
        self.arguments = _AnyArguments
        self.spec = ToolSpec(name=name, description=listed.description or listed.title or "",
                             parameters=listed.input_schema)
        self._is_async = True
        self.timeout = toolset.timeout
        self.shielded = toolset.shielded
        self.retry = toolset.retry
        self._toolset = toolset
        self._client = client

    def __repr__(self) -> str:
        return f"MCPTool({self.name!r} of {self._toolset.server})"

    def validate(self, arguments: dict[str, Any] | str) -> dict[str, Any]:
        """The arguments as sent: a JSON object (the server validates it against its schema)."""
        if not isinstance(arguments, dict):
            raise ToolArgumentsError(f"The arguments for {self.name} are not a JSON object: {arguments!r}")
        return arguments

    async def call(self, arguments: dict[str, Any], *, path: str | None = None) -> Any:
        """Ask ``approve`` (if any), then send the call, within ``timeout`` and retried as ``retry`` says.

        Raises:
            CallNotApproved: ``approve`` said no.
            MCPToolError: The server's result is an error.
            StepTimeout: The call ran past ``timeout``.
        """
        if self._toolset.approve is not None and not await self._approved(arguments):
            raise CallNotApproved(f"The call of {self.name} was not approved, so it was not made.")
        return await attempted(self.retry, path, within, self.timeout, path or f"tool:{self.name}",
                               lambda: self._send(arguments))

    async def _approved(self, arguments: dict[str, Any]) -> bool:
        approve = self._toolset.approve
        assert approve is not None
        if inspect.iscoroutinefunction(approve):
            verdict = await approve(self.remote, arguments)
        else:  # a worker thread, as a sync tool's: interrupt() works there too
            verdict = await anyio.to_thread.run_sync(approve, self.remote, arguments)
        if not isinstance(verdict, bool):
            raise ConfigurationError(
                f"approve= returned {verdict!r} for {self.remote}; return True to make the call or False to "
                f"refuse it (with interrupt(): return bool(interrupt(...).approved))."
            )
        return verdict

    async def _send(self, arguments: dict[str, Any]) -> str:
        result = await self._client.call_tool(self.remote, arguments)
        text = _flattened(result)
        if result.is_error:
            raise MCPToolError(text or f"{self.remote} failed and said nothing more.")
        return text


@asynccontextmanager
async def serving(toolsets: Sequence[MCPTools], taken: Iterable[str]) -> AsyncIterator[list[FunctionTool]]:
    """Open every server of ``toolsets`` and yield their tools until the block ends.

    Raises:
        ConfigurationError: A server cannot be opened (see `MCPTools.open`), or one
            of its tools has a name in ``taken`` or another server's.
    """
    names = set(taken)
    served: list[FunctionTool] = []
    async with AsyncExitStack() as stack:
        for toolset in toolsets:
            for tool in await stack.enter_async_context(toolset.open()):
                if tool.name in names:
                    raise ConfigurationError(
                        f"The MCP server {toolset.server} offers a tool named {tool.name!r}, and the agent has "
                        f"one of that name already. Give its MCPTools a prefix= or exclude= it."
                    )
                names.add(tool.name)
                served.append(tool)
        yield served


def _require_mcp() -> None:
    # Found, not imported: importing mcp takes a second, which a run that opens a server pays instead.
    if importlib.util.find_spec("mcp") is None:
        raise ConfigurationError(f"MCPTools needs the mcp package, which is not installed. Install it with: {_INSTALL}")


def _names(names: Iterable[str], option: str) -> frozenset[str]:
    given = [names] if isinstance(names, str) else list(names)
    if isinstance(names, str) or not all(isinstance(name, str) and name for name in given):
        raise ConfigurationError(
            f"{option}={names!r}: give the tools' names on the server as a list of strings, e.g. [\"search\"]."
        )
    return frozenset(given)


def _flattened(result: CallToolResult) -> str:
    """A call's result as the text an LLM reads: its content blocks, or its structured content."""
    from mcp.types import AudioContent, ImageContent, ResourceLink, TextContent

    parts: list[str] = []
    for block in result.content:
        if isinstance(block, TextContent):
            parts.append(block.text)
        elif isinstance(block, ImageContent | AudioContent):
            parts.append(f"[{block.type}: {block.mime_type}, {len(block.data) * 3 // 4} bytes]")
        elif isinstance(block, ResourceLink):
            parts.append(f"[resource: {block.uri}]")
        else:  # an embedded resource: its text, if it has some
            resource = block.resource
            text = getattr(resource, "text", None)
            parts.append(text if isinstance(text, str) else f"[resource: {resource.uri}, {resource.mime_type}]")
    if not parts and result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False)
    return "\n".join(parts)


def _reason(exc: BaseException) -> str:
    """What went wrong, from the errors inside the transport's exception groups."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(dict.fromkeys(_reason(inner) for inner in exc.exceptions))
    return f"{type(exc).__name__}: {exc}"
