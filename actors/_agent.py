"""`Agent`: an LLM turn loop with tools, run as a durable root actor.

Each turn is a durable step of the execution's one message:

- ``turn:N`` journals the assistant message the LLM returned for turn N;
- ``turn:N/tool:X`` journals the result of tool X called in that turn.

The conversation is rebuilt from those entries on a replay, so a recovered or
resumed run calls the LLM only for a turn whose reply was never journaled, and
runs only the tools whose results were never journaled (the one a crash or an
`interrupt()` stopped). What the journal holds per turn is that turn's delta:
the cost of a run is linear in its length.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import BaseModel, ValidationError
from tether.runtime import Actor, NoState, RunResult, Start, TetherError, call_scope
from tether.runtime._interrupt import Interrupted, Suspended
from tether.stores import ConfigurationError, Store

from ._llm import LLM
from ._messages import AssistantMessage, Message, SystemMessage, ToolCall, ToolMessage, UserMessage
from ._runner import Runner
from ._tools import FunctionTool, ToolArgumentsError, result_text

if TYPE_CHECKING:
    from collections.abc import Sequence


class MaxTurnsExceeded(TetherError):
    """The LLM took every allowed turn without a final answer; the run fails with this."""


class Agent(Runner):
    """An LLM with tools, in a loop, durable at every turn and every tool call.

    Args:
        name: The agent's name; its path is ``agent:<name>``, a tool's is
            ``agent:<name>/tool:<tool>``.
        llm: What answers each turn (`ScriptedLLM`, `OpenAIChatLLM`, or any `LLM`).
        tools: Functions the LLM may call (plain functions become `FunctionTool`).
        system_prompt: The instructions, sent first in every turn.
        store: Where its executions are journaled.
        output_type: A pydantic model the final answer must parse as (JSON);
            ``result.output`` is then an instance of it.
        max_turns: LLM calls allowed per run before it fails with `MaxTurnsExceeded`.
        lease_seconds: How long a crashed run's lease outlives its process.

    Example:
        ```python
        agent = Agent(name="refund-bot", llm=llm, tools=[FunctionTool(approve_refund)], store=store)
        result = await agent.run("Process a $50k refund.", execution_id="job-1")
        result = await agent.resume("job-1", Resume(approved=True))
        ```
    """

    def __init__(
        self,
        name: str,
        *,
        llm: LLM,
        store: Store,
        tools: Sequence[FunctionTool | Any] = (),
        system_prompt: str = "",
        output_type: type[BaseModel] | None = None,
        max_turns: int = 20,
        lease_seconds: float = 30.0,
    ) -> None:
        if max_turns < 1:
            raise ConfigurationError(f"max_turns={max_turns}: an agent needs at least one turn.")
        if not isinstance(llm, LLM):
            raise ConfigurationError(
                f"llm={llm!r} has no async complete(messages, tools) method; pass ScriptedLLM, "
                f"OpenAIChatLLM, or an object with one."
            )
        self.name = name
        self.llm = llm
        self.store = store
        self.system_prompt = system_prompt
        self.output_type = output_type
        self.max_turns = max_turns
        self.lease_seconds = lease_seconds
        self.tools: dict[str, FunctionTool] = {}
        for given in tools:
            tool = given if isinstance(given, FunctionTool) else FunctionTool(given)
            if tool.name in self.tools:
                raise ConfigurationError(f"Agent {name!r} has two tools named {tool.name!r}; pass name= to one.")
            self.tools[tool.name] = tool
        self._actor = type(f"Agent[{name}]", (_AgentActor,), {"kind": "agent", "agent": self})

    async def run(self, input: str, *, execution_id: str) -> RunResult:
        """Run the agent on the user's ``input`` to its answer or to a pause.

        The execution id is an idempotency key: running it again returns the
        stored result (or the pause), and recovers a run whose process died.
        """
        if not isinstance(input, str):
            raise ConfigurationError(f"An agent's input is the user's text, a str; got {type(input).__name__}.")
        return await self._run(input, execution_id)

    def _typed(self, result: RunResult) -> RunResult:
        if self.output_type is None or result.status != "completed":
            return result
        return result.model_copy(update={"output": self.output_type.model_validate(result.output)})

    def _opening(self, input: str) -> list[Message]:
        """The conversation before the first turn."""
        system: list[Message] = [SystemMessage(content=self.system_prompt)] if self.system_prompt else []
        return [*system, UserMessage(content=input)]

    def _answer(self, reply: AssistantMessage) -> tuple[Any, str | None]:
        """The final output of a reply without tool calls, or what to tell the LLM instead."""
        text = reply.content or ""
        if self.output_type is None:
            return text, None
        try:
            return self.output_type.model_validate_json(_unfenced(text)).model_dump(mode="json"), None
        except ValidationError as exc:
            schema = json.dumps(self.output_type.model_json_schema())
            return None, (
                f"Your answer is not valid {self.output_type.__name__} JSON ({exc.error_count()} errors: "
                f"{exc.errors()[0]['msg']}). Reply with only a JSON object matching this schema: {schema}"
            )


class _AgentActor(Actor[NoState]):
    """Runs one execution of its agent: turns until a final answer or `max_turns`."""

    kind = "agent"
    agent: Agent

    async def receive(self, message: Start) -> None:
        agent = self.agent
        conversation = agent._opening(str(message.input))
        for turn in range(1, agent.max_turns + 1):
            recorded = await self.context.step(f"turn:{turn}", self._ask, turn, list(conversation))
            reply = AssistantMessage.model_validate(recorded)
            conversation.append(reply)
            if reply.tool_calls:
                conversation.extend(await self._run_tools(turn, reply.tool_calls))
                continue
            output, correction = agent._answer(reply)
            if correction is None:
                self.context.finish(output)
                return
            conversation.append(UserMessage(content=correction))
        raise MaxTurnsExceeded(
            f"Agent {agent.name!r} used all {agent.max_turns} turns without a final answer. "
            f"Raise max_turns, or tell the LLM (in the system prompt) when to stop calling tools."
        )

    async def _ask(self, turn: int, conversation: list[Message]) -> dict[str, Any]:
        reply = await self.agent.llm.complete(conversation, [t.spec for t in self.agent.tools.values()])
        if not isinstance(reply, AssistantMessage):
            raise ConfigurationError(
                f"{type(self.agent.llm).__name__}.complete() returned {type(reply).__name__}; "
                f"an LLM returns an AssistantMessage."
            )
        # Calls get ids before they are journaled, so every replay pairs results the same way.
        calls = [c if c.id else c.model_copy(update={"id": f"call_{turn}_{i}"})
                 for i, c in enumerate(reply.tool_calls, 1)]
        return reply.model_copy(update={"tool_calls": calls}).model_dump(mode="json")

    async def _run_tools(self, turn: int, calls: list[ToolCall]) -> list[ToolMessage]:
        """Run a turn's calls concurrently; every one settles before anything is raised.

        A call that finished is journaled even when a sibling interrupts or fails,
        so a resume runs only the calls that have no result yet.
        """
        repeated = Counter(call.name for call in calls)
        results: list[ToolMessage | None] = [None] * len(calls)
        signals: list[Exception] = []

        async def run_one(index: int, call: ToolCall) -> None:
            # Calls of one turn run at once, so each needs a name of its own: the tool's,
            # or with the call's place in the turn when the LLM asked for it twice.
            segment = f"tool:{call.name}" if repeated[call.name] == 1 else f"tool:{call.name}[{index}]"
            try:
                with call_scope(segment):
                    recorded = await self.context.step(f"turn:{turn}/{segment}", self._call_tool, call)
                results[index] = ToolMessage.model_validate(recorded)
            except Exception as exc:  # noqa: BLE001 - interrupts and runtime errors, raised below
                signals.append(exc)

        if len(calls) == 1:
            await run_one(0, calls[0])
        else:
            async with anyio.create_task_group() as tg:
                for index, call in enumerate(calls):
                    tg.start_soon(run_one, index, call)
        if signals:
            raise signals[0] if len(signals) == 1 else ExceptionGroup(f"turn {turn} of {self.context.path}", signals)
        return [result for result in results if result is not None]

    async def _call_tool(self, call: ToolCall) -> dict[str, Any]:
        """One tool call, as the message the LLM reads; errors are told, not raised."""
        assert call.id is not None
        tool = self.agent.tools.get(call.name)
        try:
            if tool is None:
                offered = ", ".join(sorted(self.agent.tools)) or "none"
                raise ToolArgumentsError(f"There is no tool named {call.name!r}; the tools are: {offered}.")
            content, is_error = result_text(await tool.call(tool.validate(call.arguments))), False
        except (Interrupted, Suspended, TetherError):
            raise  # a pause, or the runtime's own failure: not the tool's answer
        except Exception as exc:  # noqa: BLE001 - the LLM is told and may try again
            content, is_error = _error_text(exc), True
        return ToolMessage(tool_call_id=call.id, name=call.name, content=content, is_error=is_error).model_dump(
            mode="json"
        )


def _error_text(exc: Exception) -> str:
    if isinstance(exc, ToolArgumentsError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def _unfenced(text: str) -> str:
    """A JSON answer without the Markdown code fence LLMs like to put around it."""
    text = text.strip()
    if text.startswith("```") and text.endswith("```"):
        text = text.split("\n", 1)[1] if "\n" in text else ""
        text = text.rsplit("```", 1)[0]
    return text.strip()
