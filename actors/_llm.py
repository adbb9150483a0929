"""The LLM an `Agent` talks to: one async method, and a scripted one for tests and demos."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeAlias, runtime_checkable

import anyio.lowlevel
from tether.runtime import TokenDelta, emit, following
from tether.stores import ConfigurationError, UsageError

from ._messages import AssistantMessage, Message, ToolCall, ToolSpec

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

Turn: TypeAlias = str | ToolCall | list[ToolCall] | AssistantMessage
"""One scripted reply: a final text, one tool call, parallel tool calls, or a whole message."""


@runtime_checkable
class LLM(Protocol):
    """Anything that answers a conversation with the assistant's next message.

    ``complete`` receives the whole conversation so far and the tools on offer,
    and returns the next `AssistantMessage`: text, tool calls, or both. It is
    called at most once per turn of a run, and again for a turn only when a
    crash interrupted that very call.
    """

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> AssistantMessage:
        """Return the assistant's next message."""
        ...


class ScriptExhausted(UsageError):
    """A `ScriptedLLM` was asked for a turn its script does not have."""


@dataclass(frozen=True)
class LLMRequest:
    """One call a `ScriptedLLM` answered: the conversation it was given and the tools on offer."""

    messages: list[Message]
    tools: list[ToolSpec]

    @property
    def tool_names(self) -> list[str]:
        """The names of the tools on offer, in order."""
        return [tool.name for tool in self.tools]


class ScriptedLLM:
    """A deterministic LLM: its replies come from a script, chosen by the conversation.

    The Nth reply is picked by the number of assistant turns already in the
    conversation it is given, never by a counter in the process: a run resumed
    in another process gets the same script. ``requests`` keeps every call this
    object answered (an `LLMRequest`: the messages and the tools), so tests can
    assert what the model was asked, and prove it was not asked again after a
    resume.

    Args:
        script: The turns in order (``"text"``, ``ToolCall(...)``, a list of
            calls, an `AssistantMessage`), or a function of the conversation
            returning the next turn.
        chunk: While someone follows the run (``agent.stream``, `tether.runtime.events`),
            a reply's text streams to them as live tokens of this many characters.

    Example:
        ```python
        llm = ScriptedLLM([ToolCall("approve_refund", {"amount": 50_000}), "Refund processed."])
        result = await agent.run("Refund order 42", execution_id="r-42")
        assert llm.requests[0].messages[-1].content == "Refund order 42"
        assert llm.requests[0].tool_names == ["approve_refund"]
        ```
    """

    provider = "tether"
    model = "scripted"
    """What telemetry names it (``gen_ai.provider.name``, ``gen_ai.request.model``)."""

    def __init__(self, script: Sequence[Turn] | Callable[[list[Message]], Turn], *, chunk: int = 4) -> None:
        if chunk < 1:
            raise ConfigurationError(f"chunk={chunk}: stream replies in pieces of at least one character.")
        self.script = script
        self.chunk = chunk
        self.requests: list[LLMRequest] = []

    @property
    def calls(self) -> int:
        """How many calls this object answered."""
        return len(self.requests)

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> AssistantMessage:
        self.requests.append(LLMRequest(list(messages), list(tools)))
        reply = as_message(self._turn(list(messages)))
        if reply.content and following():
            # Streamed as a model would, in pieces of `chunk` characters, each its own
            # scheduling point: followers see the tokens before the journaled turn.
            for start in range(0, len(reply.content), self.chunk):
                emit(TokenDelta, text=reply.content[start:start + self.chunk])
                await anyio.lowlevel.checkpoint()
        return reply

    def _turn(self, messages: list[Message]) -> Turn:
        if callable(self.script):
            return self.script(messages)
        index = sum(1 for m in messages if isinstance(m, AssistantMessage))
        if index >= len(self.script):
            raise ScriptExhausted(
                f"The script has {len(self.script)} turns and was asked for turn {index + 1}. "
                f"End it with a final answer (a string) or raise the agent's max_turns."
            )
        return self.script[index]


def as_message(turn: Turn) -> AssistantMessage:
    """One scripted turn as the assistant message it stands for."""
    if isinstance(turn, AssistantMessage):
        return turn
    if isinstance(turn, str):
        return AssistantMessage(content=turn)
    if isinstance(turn, ToolCall):
        return AssistantMessage(tool_calls=[turn])
    if isinstance(turn, list) and all(isinstance(call, ToolCall) for call in turn):
        return AssistantMessage(tool_calls=list(turn))
    raise UsageError(
        f"A scripted turn is a string, a ToolCall, a list of ToolCalls or an AssistantMessage, "
        f"not {type(turn).__name__}."
    )
