"""The conversation an `Agent` holds with its LLM: pydantic models, journaled as JSON.

A conversation is a list of messages, each with a ``role``: the system prompt,
the user's input, the assistant's turns (text and/or tool calls) and the tools'
results. The journal holds each assistant turn and each tool result once, as it
is appended; the conversation is rebuilt from them, never stored again whole.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue


class _Message(BaseModel):
    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")


class SystemMessage(_Message):
    """The agent's instructions, first in every conversation that has them."""

    role: Literal["system"] = "system"
    content: str


class UserMessage(_Message):
    """What the user (or the runtime, correcting a malformed answer) says."""

    role: Literal["user"] = "user"
    content: str


class ToolCall(_Message):
    """The assistant asking for one tool to run: ``ToolCall("approve_refund", {"amount": 50_000})``.

    ``arguments`` is a JSON object, or the raw text when an LLM sent arguments that
    do not parse (the agent then tells the LLM so instead of calling the tool).
    ``id`` pairs the call with its result; the agent numbers calls that lack one.
    """

    name: str
    arguments: dict[str, JsonValue] | str = Field(default_factory=dict)
    id: str | None = None

    def __init__(self, name: str, arguments: dict[str, Any] | str | None = None, *,
                 id: str | None = None) -> None:
        BaseModel.__init__(self, name=name, arguments={} if arguments is None else arguments, id=id)


class AssistantMessage(_Message):
    """One turn of the LLM: a final text, or tool calls to run (several run concurrently)."""

    role: Literal["assistant"] = "assistant"
    content: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)


class ToolMessage(_Message):
    """A tool's result (or its error, told to the LLM rather than raised), for one call."""

    role: Literal["tool"] = "tool"
    tool_call_id: str
    name: str
    content: str
    is_error: bool = False


Message = Annotated[
    SystemMessage | UserMessage | AssistantMessage | ToolMessage, Field(discriminator="role")
]
"""Any message of a conversation, told apart by its ``role``."""


class ToolSpec(_Message):
    """What the LLM is told about a tool: its name, what it does, its arguments' JSON schema."""

    name: str
    description: str = ""
    parameters: dict[str, JsonValue] = Field(default_factory=lambda: _no_parameters())


def _no_parameters() -> dict[str, JsonValue]:
    return {"type": "object", "properties": {}}
