"""`Agent`: an LLM turn loop with tools, run as a durable root actor (or in a team).

The loop (`TurnLoop`) journals each turn's assistant message as ``turn:N`` and
each tool result as ``turn:N/tool:X``. The conversation is rebuilt from those
entries on a replay, so a recovered or resumed run calls the LLM only for a
turn whose reply was never journaled, and runs only the tools whose results
were never journaled (the one a crash or an `interrupt()` stopped). What the
journal holds per turn is that turn's delta: the cost of a run is linear in its
length.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tether.runtime import Actor, NoState, RunResult, Start
from tether.stores import ConfigurationError, Store

from ._llm import LLM
from ._loop import Final, TurnLoop
from ._mcp import MCPTools
from ._messages import Message, SystemMessage, UserMessage
from ._retry import LLM_RETRY
from ._steps import step_retry, step_seconds
from ._threads import Threaded, opening, user_text
from ._tools import FunctionTool

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import timedelta

    from pydantic import BaseModel, JsonValue
    from tether.runtime import RetryPolicy


class Agent(Threaded):
    """An LLM with tools, in a loop, durable at every turn and every tool call.

    Args:
        name: The agent's name; its path is ``agent:<name>``, a tool's is
            ``agent:<name>/tool:<tool>``.
        llm: What answers each turn (`ScriptedLLM`, `OpenAIChatLLM`, or any `LLM`).
        tools: Functions the LLM may call (plain functions become `FunctionTool`), and
            `MCPTools`: the tools of an MCP server, listed when a run's turns start.
        system_prompt: The instructions, sent first in every turn.
        store: Where its executions are journaled (not needed inside a team: the
            team's store serves it).
        output_type: A pydantic model the final answer must parse as (JSON);
            ``result.output`` is then an instance of it.
        max_turns: LLM calls allowed per run before it fails with `MaxTurnsExceeded`.
        llm_timeout: Seconds (or a ``timedelta``) one attempt of an LLM call may take,
            the adapter's own retries included: the whole ``llm.complete(...)``. A call
            that overruns is cancelled with `StepTimeout` at ``agent:<name>/turn:<N>``,
            which ``llm_retry`` tries again; once it gives up, the run fails with it. (An
            adapter's own ``timeout``, such as `OpenAIChatLLM`'s, limits each network
            phase of each attempt instead.) Tools take their own ``timeout=`` (`FunctionTool`).
        llm_retry: How a failed LLM call is tried again, after a durable backoff (the
            failure and the next attempt's time are journaled; the run waits with no
            lease held). The default, `LLM_RETRY`, makes three attempts on a rate
            limit, a 5xx, a timeout or a dropped connection, and none on anything
            else. ``None``: the first failure fails the run.
        lease_seconds: How long a crashed run's lease outlives its process.
        version: The version runs start on (``"2"``); a run continues on the version it
            started on when that is loaded (docs/versions.md). Default: none.

    Example:
        ```python
        agent = Agent(name="refund-bot", llm=llm, tools=[FunctionTool(approve_refund)], store=store)
        result = await agent.run("Process a $50k refund.", execution_id="job-1")
        result = await agent.resume("job-1", Resume(approved=True))
        # A conversation: each run its own execution, continuing the thread's last completed one.
        await agent.run("Which order was that?", execution_id="chat-7-2", thread="chat-7")
        ```
    """

    def __init__(
        self,
        name: str,
        *,
        llm: LLM,
        store: Store | None = None,
        tools: Sequence[FunctionTool | MCPTools | Any] = (),
        system_prompt: str = "",
        output_type: type[BaseModel] | None = None,
        max_turns: int = 20,
        llm_timeout: float | timedelta | None = None,
        llm_retry: RetryPolicy | None = LLM_RETRY,
        lease_seconds: float = 30.0,
        version: str | None = None,
    ) -> None:
        if max_turns < 1:
            raise ConfigurationError(f"max_turns={max_turns}: an agent needs at least one turn.")
        if not isinstance(llm, LLM):
            raise ConfigurationError(
                f"llm={llm!r} has no async complete(messages, tools) method; pass ScriptedLLM, "
                f"OpenAIChatLLM, or an object with one."
            )
        self.name: str = self._named("agent", name)
        self.llm = llm
        self.store = store
        self.system_prompt = system_prompt
        self.output_type = output_type
        self.max_turns = max_turns
        self.llm_timeout: float | None = step_seconds(llm_timeout, f"the LLM calls of agent {name!r}",
                                                      setting="llm_timeout")
        """Seconds one attempt of an LLM call may take (``None``: no limit)."""
        self.llm_retry: RetryPolicy | None = step_retry(llm_retry, f"the LLM calls of agent {name!r}",
                                                        setting="llm_retry")
        """How a failed LLM call is tried again (``None``: it is not)."""
        self.lease_seconds = lease_seconds
        self.version = self._versioned(version)
        self.tools: dict[str, FunctionTool] = {}
        self.toolsets: list[MCPTools] = []
        """MCP servers whose tools the LLM may call too, opened for each run."""
        for given in tools:
            if isinstance(given, MCPTools):
                self.toolsets.append(given)
                continue
            tool = given if isinstance(given, FunctionTool) else FunctionTool(given)
            if tool.name in self.tools:
                raise ConfigurationError(f"Agent {name!r} has two tools named {tool.name!r}; pass name= to one.")
            self.tools[tool.name] = tool
        self._actor = type(f"Agent[{name}]", (_AgentActor,), {"kind": "agent", "agent": self})

    def _input(self, input: Any) -> JsonValue:
        return user_text(input, "An agent")

    def shape(self) -> dict[str, Any]:
        # An MCP server's tools are known here only when its MCPTools names them (include=).
        names = [*self.tools, *(name for toolset in self.toolsets for name in toolset.names())]
        return {f"tool:{name}": None for name in names}

    def definition(self) -> Any:
        model = self.output_type
        described: dict[str, Any] = {
            "tools": sorted(self.tools), "output_type": f"{model.__module__}.{model.__qualname__}" if model else None,
        }
        if self.toolsets:
            described["mcp"] = [toolset.definition() for toolset in self.toolsets]
        return described

    def _typed(self, result: RunResult) -> RunResult:
        if self.output_type is None or result.status != "completed":
            return result
        return result.model_copy(update={"output": self.output_type.model_validate(result.output)})

    def _opening(self, input: str) -> list[Message]:
        """The conversation before the first turn."""
        system: list[Message] = [SystemMessage(content=self.system_prompt)] if self.system_prompt else []
        return [*system, UserMessage(content=input)]


class _AgentActor(Actor[NoState]):
    """Runs one execution of its agent: turns until a final answer or `max_turns`."""

    kind = "agent"
    agent: Agent

    async def receive(self, message: Start) -> None:
        conversation = await opening(self.context, self.agent, self.agent, message.input)
        outcome = await TurnLoop(self.context, self.agent).run(conversation)
        assert isinstance(outcome, Final)  # an agent alone has nobody to hand off to
        self.context.finish(outcome.output)
