"""The turn loop every agent runs, alone or in a team, inside the actor handling its message.

Each turn is a durable step of that message: ``turn:N`` journals the assistant
message, ``turn:N/tool:X`` the result of each tool call. A team adds tools of
its own: ``handoff_to_<peer>`` ends the loop with a `Handoff`, and
``delegate_to_<role>`` asks a worker actor, journaled as ``delegate:N`` (the
task sent) and ``reply:N`` (the worker's answer).
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import BaseModel, ValidationError
from tether.runtime import StepTimeout, TetherError, ToolCalled, call_scope, emit, shielded
from tether.runtime.telemetry import llm_call, llm_reply
from tether.stores import ConfigurationError

from ._control import is_control, settled
from ._mcp import serving
from ._messages import AssistantMessage, Message, ToolCall, ToolMessage, ToolSpec, UserMessage
from ._steps import attempted, within
from ._tools import ToolArgumentsError, result_text

if TYPE_CHECKING:
    from tether.runtime import ActorContext

    from ._agent import Agent

Delegate = Callable[[str, str], Awaitable[Any]]
"""``delegate(role, task)``: ask the worker with that role; returns its final answer."""


class MaxTurnsExceeded(TetherError):
    """The LLM took every allowed turn without a final answer; the run fails with this."""


class MaxDelegationsExceeded(TetherError):
    """A supervisor asked for more delegations than ``max_delegations``; the run fails with this."""


@dataclass(frozen=True)
class Final:
    """The loop ended with an answer (JSON: text, or an ``output_type`` model's dump)."""

    output: Any


@dataclass(frozen=True)
class Handoff:
    """The loop ended by handing the task to a peer."""

    to: str
    message: str


class _HandoffArguments(BaseModel, extra="forbid"):
    message: str = ""


class _DelegateArguments(BaseModel, extra="forbid"):
    task: str


class TurnLoop:
    """One agent's turns, run by the actor that handles the current message.

    Args:
        context: The running actor's context (its durable steps).
        agent: Whose LLM, tools, prompt and limits.
        handoffs: Peers this agent may hand the task to.
        workers: Roles this agent may delegate to, with what each is for.
        delegate: How to reach a worker (given with ``workers``).
        max_delegations: Delegations allowed per message handled.
    """

    def __init__(
        self,
        context: ActorContext,
        agent: Agent,
        *,
        handoffs: Sequence[str] = (),
        workers: Mapping[str, str] | None = None,
        delegate: Delegate | None = None,
        max_delegations: int | None = None,
    ) -> None:
        self.context = context
        self.agent = agent
        self.handoffs = {f"handoff_to_{peer}": peer for peer in handoffs}
        self.workers = {f"delegate_to_{role}": role for role in workers or {}}
        self.delegate = delegate
        self.max_delegations = max_delegations
        self.delegated = 0
        self.tools = dict(agent.tools)  # and, while a run's turns go on, the tools of its MCP servers
        self.specs = [tool.spec for tool in self.tools.values()]
        self.specs += [
            ToolSpec(name=name, description=f"Hand the task over to {peer}, with a message saying what you "
                                            f"found and what is left to do.",
                     parameters=_HandoffArguments.model_json_schema())
            for name, peer in self.handoffs.items()
        ]
        self.specs += [
            ToolSpec(name=f"delegate_to_{role}", description=description or f"Ask the {role} to do a task.",
                     parameters=_DelegateArguments.model_json_schema())
            for role, description in (workers or {}).items()
        ]

    async def run(self, conversation: list[Message]) -> Final | Handoff:
        """Take turns until the LLM answers, hands off, or uses up ``max_turns``.

        The agent's MCP servers (`MCPTools`) are open while the turns go on: opened
        here, and closed when this handling ends, however it ends.
        """
        if not self.agent.toolsets:
            return await self._turns(conversation)
        async with serving(self.agent.toolsets, taken=[*self.tools, *self.handoffs, *self.workers]) as served:
            own = len(self.tools)
            self.tools.update((tool.name, tool) for tool in served)
            self.specs[own:own] = [tool.spec for tool in served]
            return await self._turns(conversation)

    async def _turns(self, conversation: list[Message]) -> Final | Handoff:
        agent = self.agent
        for turn in range(1, agent.max_turns + 1):
            recorded = await self.context.step(f"turn:{turn}", self._ask, turn, list(conversation))
            reply = AssistantMessage.model_validate(recorded)
            conversation.append(reply)
            if reply.tool_calls:
                results, handoff = await self._run_tools(turn, reply.tool_calls)
                conversation.extend(results)
                if handoff is not None:
                    return handoff
                continue
            output, correction = self._answer(reply)
            if correction is None:
                return Final(output)
            conversation.append(UserMessage(content=correction))
        raise MaxTurnsExceeded(
            f"Agent {agent.name!r} at {self.context.path!r} used all {agent.max_turns} turns without a "
            f"final answer. Raise max_turns, or tell the LLM (in the system prompt) when to stop calling tools."
        )

    async def _complete(self, conversation: list[Message]) -> AssistantMessage:
        """One call to the LLM: one attempt of a turn, with its telemetry span."""
        llm = self.agent.llm
        provider = getattr(llm, "provider", None) or type(llm).__name__
        with llm_call(provider=provider, model=str(getattr(llm, "model", type(llm).__name__)),
                      messages=conversation):
            reply = await llm.complete(conversation, self.specs)
            llm_reply(reply)
        return reply

    async def _ask(self, turn: int, conversation: list[Message]) -> dict[str, Any]:
        llm = self.agent.llm
        path = f"{self.context.path}/turn:{turn}"
        # Only the call is timed, each attempt on its own: the journal write of its reply, after it, is not.
        timed = functools.partial(within, self.agent.llm_timeout, path, setting="llm_timeout")
        reply = await attempted(self.agent.llm_retry, path, timed, self._complete, conversation)
        if not isinstance(reply, AssistantMessage):
            raise ConfigurationError(
                f"{type(llm).__name__}.complete() returned {type(reply).__name__}; an LLM returns an AssistantMessage."
            )
        # Calls get ids before they are journaled, so every replay pairs results the same way.
        calls = [c if c.id else c.model_copy(update={"id": f"call_{turn}_{i}"})
                 for i, c in enumerate(reply.tool_calls, 1)]
        return reply.model_copy(update={"tool_calls": calls}).model_dump(mode="json")

    def _answer(self, reply: AssistantMessage) -> tuple[Any, str | None]:
        """The final output of a reply without tool calls, or what to tell the LLM instead."""
        text = reply.content or ""
        model = self.agent.output_type
        if model is None:
            return text, None
        try:
            return model.model_validate_json(_unfenced(text)).model_dump(mode="json"), None
        except ValidationError as exc:
            schema = json.dumps(model.model_json_schema())
            return None, (
                f"Your answer is not valid {model.__name__} JSON ({exc.error_count()} errors: "
                f"{exc.errors()[0]['msg']}). Reply with only a JSON object matching this schema: {schema}"
            )

    # -- tool calls ------------------------------------------------------------------

    async def _run_tools(self, turn: int, calls: list[ToolCall]) -> tuple[list[ToolMessage], Handoff | None]:
        """Run a turn's calls concurrently; every one settles before anything is raised.

        A call that finished is journaled even when a sibling interrupts or fails,
        so a resume runs only the calls that have no result yet. A handoff call
        runs nothing: once its siblings settle, the loop ends with it.
        """
        handoff, results = self._handoff(calls)
        ordinals = self._number_delegations(calls)
        repeated = Counter(call.name for call in calls)
        signals: list[BaseException] = []

        async def run_one(index: int, call: ToolCall) -> None:
            # Calls of one turn run at once, so each needs a name of its own: the tool's,
            # or with the call's place in the turn when the LLM asked for it twice.
            segment = f"tool:{call.name}" if repeated[call.name] == 1 else f"tool:{call.name}[{index}]"
            try:
                with call_scope(segment) as name:
                    tool = self.tools.get(call.name)
                    if index in ordinals:
                        recorded = await self._delegation(ordinals[index], call)
                    else:
                        # A shielded tool's shield covers its call and the record of its result.
                        with shielded() if tool is not None and tool.shielded else nullcontext():
                            recorded = await self.context.step(f"turn:{turn}/{segment}", self._call_tool, call,
                                                               f"{self.context.path}/{name}")
                results[index] = ToolMessage.model_validate(recorded)
            except BaseException as exc:
                if not settled(exc):
                    raise  # a cancellation: not this call's outcome
                signals.append(exc)  # pauses and runtime errors, raised below

        pending = [(i, call) for i, call in enumerate(calls) if results[i] is None]
        if len(pending) == 1:
            await run_one(*pending[0])
        elif pending:
            async with anyio.create_task_group() as tg:
                for index, call in pending:
                    tg.start_soon(run_one, index, call)
        if signals:
            raise signals[0] if len(signals) == 1 else BaseExceptionGroup(f"turn {turn} of {self.context.path}", signals)
        return [result for result in results if result is not None], handoff

    def _handoff(self, calls: list[ToolCall]) -> tuple[Handoff | None, list[ToolMessage | None]]:
        """The turn's handoff (its first valid handoff call), and the messages that answer handoff calls."""
        handoff: Handoff | None = None
        results: list[ToolMessage | None] = [None] * len(calls)
        for index, call in enumerate(calls):
            peer = self.handoffs.get(call.name)
            if peer is None:
                continue
            assert call.id is not None
            try:
                message = _HandoffArguments.model_validate(call.arguments).message
            except ValidationError as exc:
                results[index] = ToolMessage(tool_call_id=call.id, name=call.name, is_error=True,
                                             content=f"Invalid arguments for {call.name}: {exc.errors()[0]['msg']}")
                continue
            text = f"Handed the task to {peer}." if handoff is None else "Not handed off: one handoff per turn."
            results[index] = ToolMessage(tool_call_id=call.id, name=call.name, content=text)
            handoff = handoff or Handoff(peer, message)
        return handoff, results

    def _number_delegations(self, calls: list[ToolCall]) -> dict[int, int]:
        """Number this turn's delegations after those of earlier turns: the same on every replay."""
        ordinals = {}
        for index, call in enumerate(calls):
            if call.name in self.workers:
                self.delegated += 1
                ordinals[index] = self.delegated
        if self.max_delegations is not None and self.delegated > self.max_delegations:
            raise MaxDelegationsExceeded(
                f"{self.context.path!r} asked for delegation {self.delegated}, over max_delegations="
                f"{self.max_delegations}. Raise it, or tell the LLM to answer once the workers have."
            )
        return ordinals

    async def _delegation(self, number: int, call: ToolCall) -> Any:
        """``delegate:N`` journals the task, the worker's own journal its work, ``reply:N`` its answer."""
        assert call.id is not None
        assert self.delegate is not None
        role = self.workers[call.name]
        try:
            task = _DelegateArguments.model_validate(call.arguments).task
        except ValidationError as exc:
            return ToolMessage(tool_call_id=call.id, name=call.name, is_error=True,
                               content=f"Invalid arguments for {call.name}: {exc.errors()[0]['msg']}").model_dump()
        delegate = self.delegate

        async def sent() -> dict[str, str]:
            return {"to": role, "task": task}

        async def answered() -> dict[str, Any]:
            answer = await delegate(role, task)
            return ToolMessage(tool_call_id=call.id or "", name=call.name,
                               content=result_text(answer)).model_dump(mode="json")

        await self.context.step(f"delegate:{number}", sent)
        return await self.context.step(f"reply:{number}", answered)

    async def _call_tool(self, call: ToolCall, path: str) -> dict[str, Any]:
        """One tool call, as the message the LLM reads; errors are told, not raised.

        A call that ran past the tool's timeout is told too: it is this tool's
        outcome, not the runtime's failure (a `StepTimeout` of some other step, from
        deeper down, is).
        """
        assert call.id is not None
        tools = self.tools
        tool = tools.get(call.name)
        emit(ToolCalled, tool=call.name, arguments=call.arguments)
        try:
            if tool is None:
                offered = ", ".join(sorted([*tools, *self.handoffs, *self.workers])) or "none"
                raise ToolArgumentsError(f"There is no tool named {call.name!r}; the tools are: {offered}.")
            result = await tool.call(tool.validate(call.arguments), path=path)
        except Exception as exc:
            if is_control(exc) and not (isinstance(exc, StepTimeout) and exc.path == path):
                raise  # the runtime's own failure: not the tool's answer (a pause is no Exception)
            content = str(exc) if isinstance(exc, ToolArgumentsError) else f"{type(exc).__name__}: {exc}"
            is_error = True
        else:
            try:
                content, is_error = result_text(result), False
            except Exception as exc:  # noqa: BLE001 - the tool has run: say so, never "it failed"
                content = (f"{call.name} ran, but its result could not be encoded as JSON ({type(exc).__name__}: "
                           f"{exc}). Do not call it again for the same request.")
                is_error = True
        return ToolMessage(tool_call_id=call.id, name=call.name, content=content,
                           is_error=is_error).model_dump(mode="json")


def _unfenced(text: str) -> str:
    """A JSON answer without the Markdown code fence LLMs like to put around it."""
    text = text.strip()
    if text.startswith("```") and text.endswith("```"):
        text = text.split("\n", 1)[1] if "\n" in text else ""
        text = text.rsplit("```", 1)[0]
    return text.strip()
