"""`AnthropicLLM`: Anthropic's Messages API (``POST /v1/messages``), over httpx, without the SDK.

httpx runs on anyio, so the adapter works under asyncio and trio alike.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tether.runtime import TokenDelta, emit
from tether.runtime.telemetry import llm_usage
from tether.stores import ConfigurationError

from ._http import HTTPLLM, RETRIED_STATUSES, IncompleteStream, LLMError, StreamedError
from ._messages import AssistantMessage, Message, SystemMessage, ToolCall, ToolMessage, ToolSpec, UserMessage

if TYPE_CHECKING:
    from collections.abc import Sequence

    import httpx
    from pydantic import JsonValue

ERROR_STATUSES = {
    "invalid_request_error": 400, "authentication_error": 401, "billing_error": 402, "permission_error": 403,
    "not_found_error": 404, "request_too_large": 413, "rate_limit_error": 429, "api_error": 500,
    "timeout_error": 504, "overloaded_error": 529,
}
"""The HTTP status each of the API's error types stands for (an ``error`` event in a stream has only the type)."""


class AnthropicLLM(HTTPLLM):
    """An `LLM` that calls Anthropic's Messages API, ``POST {base_url}/v1/messages``.

    The conversation is put in the API's shape: the system messages become the
    top-level ``system``; an assistant's tool calls become ``tool_use`` blocks
    (their ids kept); tool results become ``tool_result`` blocks of a user
    message (the results of one turn in one message, since the roles must
    alternate); tools are sent with their ``input_schema``. The reply's text
    blocks are joined into its content and its ``tool_use`` blocks become
    `ToolCall` objects with the API's ids.

    Retries 408, 409, 429, 529 (overloaded) and every other 5xx answer, and transport
    errors (connection refused, timeouts), up to ``max_retries`` times, waiting
    ``retry-after`` when the server says so and an exponential, jittered delay
    otherwise. Any other error answer (a 400, a 401) raises `LLMError` at once,
    with the API's error type and message.

    Use ``async with`` to keep one connection pool across calls; without it,
    each call opens and closes its own.

    With ``stream=True`` the request asks for server-sent events, and each piece
    of the reply's text is published as a live `TokenDelta` to whoever follows
    the run (``agent.stream``, `tether.runtime.events`) as it arrives; tool
    calls are put together from their ``input_json_delta`` pieces. The reply
    returned (and journaled) is the message a non-streamed call returns. A
    transport error in the middle of the stream, a stream that ends before
    ``message_stop`` (and before a ``message_delta`` with a ``stop_reason``), or
    an ``error`` event of an overloaded or failing server sends the whole
    request again, as a failed request is. The live tokens of a failed attempt
    were already sent (a follower may see a reply start twice); the journal
    holds only the final attempt's message.

    Args:
        model: The model name sent with each request (``claude-sonnet-4-5``).
        api_key: Sent as ``x-api-key`` (default: ``$ANTHROPIC_API_KEY``; none if unset).
        base_url: The API root, without ``/v1``.
        max_tokens: The most tokens the reply may have (the API requires a bound).
        anthropic_version: Sent as ``anthropic-version``.
        timeout: httpx's timeout for each phase of an attempt (connect, each read, write, pool).
        max_retries: Attempts after the first.
        backoff: The first retry's delay in seconds; each next one doubles, to at most 30.
        stream: Stream the reply (server-sent events), publishing its text as live tokens.
        params: More fields for the request body (``temperature=0``, ``tool_choice={...}``).

    Example:
        ```python
        async with AnthropicLLM("claude-sonnet-4-5") as llm:
            agent = Agent(name="refund-bot", llm=llm, tools=[approve_refund], store=store)
            result = await agent.run("Process a $50k refund.", execution_id="job-1")
        ```
    """

    path = "/v1/messages"
    provider = "anthropic"

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str = "https://api.anthropic.com",
        max_tokens: int = 4096,
        anthropic_version: str = "2023-06-01",
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        stream: bool = False,
        **params: JsonValue,
    ) -> None:
        if max_tokens < 1:
            raise ConfigurationError(f"max_tokens={max_tokens} must be 1 or more.")
        # The API root; a base URL given up to /v1 (as OpenAI-style ones are) means the same root.
        super().__init__(model, base_url=base_url.rstrip("/").removesuffix("/v1"),
                         api_key=api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY"),
                         timeout=timeout, max_retries=max_retries, backoff=backoff, stream=stream, params=params)
        self.max_tokens = max_tokens
        self.anthropic_version = anthropic_version

    def _headers(self) -> dict[str, str]:
        headers = {"anthropic-version": self.anthropic_version, "content-type": "application/json"}
        if self.api_key:
            headers["x-api-key"] = self.api_key
        return headers

    def _body(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> dict[str, Any]:
        system, conversation = wire_messages(messages)
        body: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens}
        if system is not None:
            body["system"] = system
        body["messages"] = conversation
        if tools:
            body["tools"] = [
                {"name": t.name, **({"description": t.description} if t.description else {}),
                 "input_schema": t.parameters}
                for t in tools
            ]
        return body

    async def _read_stream(self, response: httpx.Response) -> AssistantMessage:
        """The reply in a 200 answer's server-sent events, each piece of text emitted as it comes."""
        import httpx

        if not response.headers.get("content-type", "").lower().startswith("text/event-stream"):
            # A server (or proxy) that does not stream answers with the whole message.
            await response.aread()
            reply = self._reply(self._json(response))
            if reply.content:
                emit(TokenDelta, text=reply.content)
            return reply
        blocks = _Blocks()
        failure: Exception | None = None
        name = ""  # the event: field of the event being read
        data: list[str] = []  # its data: lines
        try:
            # The body is read to its end even after message_stop or a failure, never left
            # midway: the connection can go back to the pool, and httpx's generators finish.
            async for line in response.aiter_lines():
                if blocks.done or failure is not None:
                    continue
                if line.startswith("data:"):
                    data.append(line[5:].removeprefix(" "))
                elif line.startswith("event:"):
                    name = line[6:].strip()
                elif not line and data:  # a blank line ends an event
                    failure = self._add_event(blocks, name, "\n".join(data))
                    name, data = "", []
                # else a comment (":"), another field (id:, retry:), or a blank line between events
            if data and not blocks.done and failure is None:
                failure = self._add_event(blocks, name, "\n".join(data))  # the last one, no blank line after it
        except httpx.TransportError:
            if failure is None and not (blocks.done or blocks.finished):
                raise
            # else the reply was whole (or refused) already
        if failure is not None:
            raise failure
        if not (blocks.done or blocks.finished):
            raise IncompleteStream("the stream ended before message_stop")
        return blocks.message()

    def _add_event(self, blocks: _Blocks, name: str, data: str) -> Exception | None:
        """Add one event to the reply; the error to raise if it is one (or is not an event)."""
        try:
            event = json.loads(data)
        except ValueError:
            return LLMError(f"{self!r} streamed an event that is not JSON: {data[:500]}", status=200)
        if not isinstance(event, dict):
            return LLMError(f"{self!r} streamed an event that is not an object: {data[:500]}", status=200)
        kind = event.get("type") or name
        if kind == "error":
            error = event.get("error")
            error_type = error.get("type") if isinstance(error, dict) else None
            status = ERROR_STATUSES.get(error_type) if isinstance(error_type, str) else None
            described = _described(error) or data[:500]
            if status is not None and (status in RETRIED_STATUSES or status >= 500):
                return StreamedError(described, status=status)
            return LLMError(f"{self!r} streamed an error: {described}", status=status or 200)
        try:
            blocks.add(kind, event)
        except (AttributeError, TypeError, KeyError, ValueError):
            return LLMError(f"{self!r} streamed a {kind!r} event that is not a Messages API event: {data[:500]}",
                            status=200)
        return None

    def _reply(self, data: Any) -> AssistantMessage:
        """The assistant message in a Messages API answer."""
        content = data.get("content") if isinstance(data, dict) else None
        if not isinstance(content, list):
            raise LLMError(f"{self!r} answered with no content blocks: {json.dumps(data)[:500]}", status=200)
        text: list[str] = []
        calls: list[ToolCall] = []
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                text.append(block["text"])
            elif block.get("type") == "tool_use":
                arguments = block.get("input")
                calls.append(ToolCall(str(block.get("name", "")),
                                      arguments if isinstance(arguments, dict) else json.dumps(arguments),
                                      id=block.get("id")))
            # else a thinking block, a server tool's, a citation: not part of the conversation's reply
        _usage(data, data.get("stop_reason"))
        return AssistantMessage(content="".join(text) or None, tool_calls=calls)

    def _error_text(self, response: httpx.Response) -> str:
        try:
            described = _described(response.json().get("error"))
        except (ValueError, AttributeError):
            described = None
        request_id = response.headers.get("request-id")
        return (described or response.text[:500]) + (f" (request-id {request_id})" if request_id else "")


def _described(error: Any) -> str | None:
    """``"invalid_request_error: max_tokens: ..."`` from the API's ``error`` object, if it is one."""
    if not isinstance(error, dict) or not isinstance(error.get("message"), str):
        return None
    return f"{error['type']}: {error['message']}" if isinstance(error.get("type"), str) else error["message"]


def wire_messages(messages: Sequence[Message]) -> tuple[str | None, list[dict[str, Any]]]:
    """The conversation in the Messages API's shape: the ``system`` text, and the alternating ``messages``.

    Consecutive messages of one role (the tool results of a turn, a correction
    after them) are merged into one message of content blocks, results first.
    """
    system: list[str] = []
    turns: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return  # an empty text block is refused: a message with nothing to say is left out
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})

    for message in messages:
        if isinstance(message, SystemMessage):
            system.append(message.content)
        elif isinstance(message, UserMessage):
            add("user", [{"type": "text", "text": message.content}] if message.content else [])
        elif isinstance(message, ToolMessage):
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": _tool_use_id(message.tool_call_id),
                                      "content": message.content}
            if message.is_error:
                result["is_error"] = True
            add("user", [result])
        else:
            blocks: list[dict[str, Any]] = [{"type": "text", "text": message.content}] if message.content else []
            blocks += [{"type": "tool_use", "id": _tool_use_id(call.id or f"call_{i}"), "name": call.name,
                        "input": _input(call.arguments)}
                       for i, call in enumerate(message.tool_calls)]
            add("assistant", blocks)
    for turn in turns:  # a lone text block is sent as the plain string
        if len(turn["content"]) == 1 and turn["content"][0]["type"] == "text":
            turn["content"] = turn["content"][0]["text"]
    return ("\n\n".join(system) if system else None), turns


def _tool_use_id(call_id: str) -> str:
    """A call's id as the API accepts one (letters, digits, ``_`` and ``-``): the same for a call and its result."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", call_id)


def _input(arguments: dict[str, Any] | str) -> dict[str, Any]:
    """A call's arguments as a ``tool_use`` input, which must be an object.

    Arguments that were not a JSON object (the agent told the model so in the
    call's result) go back as an empty object.
    """
    if isinstance(arguments, dict):
        return arguments
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


@dataclass
class _Block:
    type: str
    text: list[str] = field(default_factory=list)
    id: str | None = None
    name: str = ""
    input: Any = None
    partial_json: list[str] = field(default_factory=list)


def _usage(data: dict[str, Any], stop_reason: object) -> None:
    """What an answer (or a streamed event) says about itself, for telemetry."""
    usage = data.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    llm_usage(input_tokens=usage.get("input_tokens"), output_tokens=usage.get("output_tokens"),
              finish_reasons=[str(stop_reason)] if stop_reason else None, response_model=data.get("model"),
              response_id=data.get("id"))


@dataclass
class _Blocks:
    """A streamed reply, put together from its events' content blocks."""

    blocks: dict[int, _Block] = field(default_factory=dict)
    finished: bool = False
    """A ``message_delta`` with a ``stop_reason`` came: the reply is whole even if ``message_stop`` does not."""
    done: bool = False
    """``message_stop`` came."""

    def add(self, kind: str, event: dict[str, Any]) -> None:
        if kind == "content_block_start":
            start = event["content_block"]
            block = self.blocks[int(event["index"])] = _Block(type=start["type"])
            if block.type == "text" and start.get("text"):
                self._text(block, start["text"])
            elif block.type == "tool_use":
                block.id, block.name, block.input = start.get("id"), start.get("name") or "", start.get("input")
        elif kind == "content_block_delta":
            delta = event["delta"]
            if delta["type"] == "text_delta":
                self._text(self.blocks.setdefault(int(event["index"]), _Block("text")), delta["text"])
            elif delta["type"] == "input_json_delta":
                self.blocks.setdefault(int(event["index"]), _Block("tool_use")).partial_json.append(
                    delta["partial_json"])
            # else thinking, a signature, a citation: not part of the conversation's reply
        elif kind == "message_delta":
            stop = (event.get("delta") or {}).get("stop_reason")
            if stop:
                self.finished = True
            _usage(event, stop)
        elif kind == "message_start":
            started = event.get("message") or {}
            usage = started.get("usage") or {}  # its output count is a placeholder: message_delta has the real one
            llm_usage(input_tokens=usage.get("input_tokens"), response_model=started.get("model"),
                      response_id=started.get("id"))
        elif kind == "message_stop":
            self.done = True
        # else content_block_stop, ping, or an event type newer than this code

    def _text(self, block: _Block, piece: str) -> None:
        if not isinstance(piece, str):
            raise TypeError(piece)
        if piece:
            block.text.append(piece)
            emit(TokenDelta, text=piece)

    def message(self) -> AssistantMessage:
        text: list[str] = []
        calls: list[ToolCall] = []
        for _, block in sorted(self.blocks.items()):
            if block.type == "text":
                text += block.text
            elif block.type == "tool_use":
                calls.append(ToolCall(block.name, _arguments(block), id=block.id))
        return AssistantMessage(content="".join(text) or None, tool_calls=calls)


def _arguments(block: _Block) -> dict[str, Any] | str:
    """A streamed call's input: its JSON pieces joined (or the start's input), the text if not an object."""
    raw = "".join(block.partial_json)
    if not raw.strip():
        return block.input if isinstance(block.input, dict) else {}
    try:
        parsed = json.loads(raw)
    except ValueError:
        return raw
    return parsed if isinstance(parsed, dict) else raw
