"""AnthropicLLM against a real local HTTP server that speaks the Messages API (no network)."""

from __future__ import annotations

import dataclasses
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from tether.actors import (
    LLM,
    LLM_RETRY,
    Agent,
    AnthropicLLM,
    AssistantMessage,
    LLMError,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolSpec,
    UserMessage,
    retriable_llm_error,
)
from tether.runtime import Resume, interrupt
from tether.stores import ConfigurationError, Store

from ._anthropic_server import Answer, AnthropicServer, error, streamed, text, tool_use
from ._scripted_server import follow, journaled_turn


@pytest.fixture
def server() -> Iterator[AnthropicServer]:
    with AnthropicServer() as running:
        yield running


def llm_for(server: AnthropicServer, **options: Any) -> AnthropicLLM:
    return AnthropicLLM("claude-test", base_url=server.url, api_key="sk-ant-test", backoff=0.001, **options)


def approve_refund(amount: int) -> dict[str, Any]:
    """Approve a refund."""
    if amount > 10_000:
        return {"approved": interrupt("manager_approval", {"amount": amount}).approved}
    return {"approved": True}


def lookup(order: int) -> dict[str, Any]:
    """Look an order up."""
    if order < 0:
        raise LookupError(f"no order {order}")
    return {"order": order, "total": 120}


HI = [UserMessage(content="hi")]


async def test_an_agent_over_the_wire(server: AnthropicServer, db_store: Store) -> None:
    server.answers += [tool_use(("approve_refund", {"amount": 50_000})), text("Refund processed.")]
    async with llm_for(server, temperature=0) as llm:
        assert isinstance(llm, LLM)
        agent = Agent(name="refund-bot", system_prompt="Be brief.", llm=llm, tools=[approve_refund],
                      store=db_store)
        paused = await agent.run("Process a $50k refund.", execution_id="wire")
        assert paused.status == "paused"
        done = await agent.resume("wire", Resume(approved=True))
    assert done.status == "completed"
    assert done.output == "Refund processed."
    assert len(server.requests) == 2  # the resume did not ask turn 1 again
    assert server.requests[0]["path"] == "/v1/messages"
    headers = server.headers[0]
    assert headers["x-api-key"] == "sk-ant-test"
    assert headers["anthropic-version"] == "2023-06-01"
    assert headers["content-type"] == "application/json"
    assert "authorization" not in headers
    first, second = (r["body"] for r in server.requests)
    assert first["model"] == "claude-test" and first["max_tokens"] == 4096 and first["temperature"] == 0
    assert first["system"] == "Be brief."
    assert first["messages"] == [{"role": "user", "content": "Process a $50k refund."}]
    [tool] = first["tools"]
    assert set(tool) == {"name", "description", "input_schema"}
    assert tool["name"] == "approve_refund" and tool["description"] == "Approve a refund."
    assert tool["input_schema"]["type"] == "object" and tool["input_schema"]["required"] == ["amount"]
    assert "stream" not in first
    assert second["messages"][1:] == [
        {"role": "assistant",
         "content": [{"type": "tool_use", "id": "toolu_0", "name": "approve_refund", "input": {"amount": 50000}}]},
        {"role": "user",
         "content": [{"type": "tool_result", "tool_use_id": "toolu_0", "content": '{"approved": true}'}]},
    ]


async def test_parallel_calls_answer_in_one_user_message(server: AnthropicServer, db_store: Store) -> None:
    server.answers += [
        tool_use(("lookup", {"order": 7}), ("lookup", {"order": -1}), say="Let me check both orders."),
        text("Order 7 totals $120; there is no order -1."),
    ]
    agent = Agent(name="orders", system_prompt="You look orders up.", llm=llm_for(server), tools=[lookup],
                  store=db_store)
    result = await agent.run("Orders 7 and -1?", execution_id="parallel")
    assert result.status == "completed", result.error
    assert result.output == "Order 7 totals $120; there is no order -1."
    reply = await journaled_turn(db_store, "parallel")
    assert reply["content"] == "Let me check both orders."
    assert [(c["id"], c["arguments"]) for c in reply["tool_calls"]] == [("toolu_0", {"order": 7}),
                                                                         ("toolu_1", {"order": -1})]
    told = server.requests[1]["body"]["messages"]
    assert [m["role"] for m in told] == ["user", "assistant", "user"]  # the server checked they alternate
    assert told[1]["content"][0] == {"type": "text", "text": "Let me check both orders."}
    [ok, failed] = told[2]["content"]
    assert ok["tool_use_id"] == "toolu_0" and json.loads(ok["content"]) == {"order": 7, "total": 120}
    assert "is_error" not in ok
    assert failed["tool_use_id"] == "toolu_1" and failed["is_error"] is True
    assert "no order -1" in failed["content"]


async def test_every_message_kind_goes_on_the_wire(server: AnthropicServer) -> None:
    server.answers.append(text("ok"))
    conversation: list[Message] = [
        SystemMessage(content="You process refunds."), SystemMessage(content="Be brief."),
        UserMessage(content="Refund order 7."),
        AssistantMessage(content="Looking.", tool_calls=[ToolCall("f", {"x": 1}, id="call_1_0"),
                                                         ToolCall("f", '{"x": 2', id="call.1.1")]),
        ToolMessage(tool_call_id="call_1_0", name="f", content="2"),
        ToolMessage(tool_call_id="call.1.1", name="f", content="not a JSON object", is_error=True),
        UserMessage(content="Answer in one line."),
    ]
    reply = await llm_for(server).complete(conversation, [ToolSpec(name="f"), ToolSpec(name="g", description="G.")])
    assert reply == AssistantMessage(content="ok")
    body = server.requests[0]["body"]
    assert body["system"] == "You process refunds.\n\nBe brief."
    assert body["messages"] == [
        {"role": "user", "content": "Refund order 7."},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": "call_1_0", "name": "f", "input": {"x": 1}},
            {"type": "tool_use", "id": "call_1_1", "name": "f", "input": {}},  # the API's id pattern; an object
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_1_0", "content": "2"},
            {"type": "tool_result", "tool_use_id": "call_1_1", "content": "not a JSON object", "is_error": True},
            {"type": "text", "text": "Answer in one line."},
        ]},
    ]
    assert body["tools"] == [{"name": "f", "input_schema": {"type": "object", "properties": {}}},
                             {"name": "g", "description": "G.", "input_schema": {"type": "object", "properties": {}}}]


async def test_the_key_comes_from_the_environment(server: AnthropicServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env")
    server.answers.append(text("hello"))
    llm = AnthropicLLM("claude-test", base_url=server.url + "/v1/", max_tokens=64, anthropic_version="2099-01-01")
    assert (await llm.complete(HI, [])).content == "hello"
    assert server.requests[0]["path"] == "/v1/messages"  # a base URL up to /v1 means the same root
    assert server.headers[0]["x-api-key"] == "sk-ant-env"
    assert server.headers[0]["anthropic-version"] == "2099-01-01"
    assert server.requests[0]["body"]["max_tokens"] == 64
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(LLMError, match=r"answered 401 \(attempt 1\): authentication_error: x-api-key") as caught:
        await AnthropicLLM("claude-test", base_url=server.url, backoff=0.001).complete(HI, [])
    assert caught.value.status == 401
    assert not retriable_llm_error(caught.value)
    assert len(server.requests) == 2


def test_options_are_checked() -> None:
    for options in ({"max_retries": -1}, {"timeout": 0}, {"max_tokens": 0}):
        with pytest.raises(ConfigurationError):
            AnthropicLLM("claude-test", **options)  # type: ignore[arg-type]
    assert repr(AnthropicLLM("m")) == "AnthropicLLM('m', base_url='https://api.anthropic.com')"


async def test_rate_limits_overloads_and_server_errors_are_retried(server: AnthropicServer) -> None:
    server.answers += [error(429, "rate_limit_error", "slow down", {"retry-after": "0"}),
                       error(529, "overloaded_error", "Overloaded"), error(500, "api_error", "Internal server error"),
                       text("hello")]
    reply = await llm_for(server).complete(HI, [])
    assert reply.content == "hello"
    assert len(server.requests) == 4


async def test_retries_run_out_and_the_agent_retries_durably(server: AnthropicServer, db_store: Store) -> None:
    server.answers += [error(529, "overloaded_error", "Overloaded"), error(529, "overloaded_error", "Still overloaded")]
    with pytest.raises(LLMError, match=r"answered 529 \(attempt 2\): overloaded_error: Still overloaded") as caught:
        await llm_for(server, max_retries=1).complete(HI, [])
    assert caught.value.status == 529
    assert "request-id req_test" in str(caught.value)
    assert retriable_llm_error(caught.value)  # LLM_RETRY tries the step again, after a durable backoff
    assert len(server.requests) == 2
    # An adapter that gives up at once: the agent's llm_retry carries on.
    server.answers += [error(529, "overloaded_error", "Overloaded"), text("back")]
    agent = Agent(name="bot", llm=llm_for(server, max_retries=0), store=db_store,
                  llm_retry=dataclasses.replace(LLM_RETRY, initial=0.01))
    result = await agent.run("hi", execution_id="durable-retry")
    assert result.status == "completed" and result.output == "back"
    assert len(server.requests) == 4


async def test_a_bad_request_is_an_llm_error_with_the_apis_message(server: AnthropicServer) -> None:
    server.answers += [error(400, "invalid_request_error", "max_tokens: 999999 > 64000, the maximum for this model"),
                       text("never")]
    with pytest.raises(LLMError, match=r"answered 400 \(attempt 1\): invalid_request_error: max_tokens: 999999"
                                       r".*request-id req_test") as caught:
        await llm_for(server, max_tokens=999_999).complete(HI, [])
    assert caught.value.status == 400
    assert not retriable_llm_error(caught.value)
    assert len(server.requests) == 1
    # The server's own check: a conversation the API refuses is refused here too.
    with pytest.raises(LLMError, match="first message must use the \"user\" role"):
        await llm_for(server).complete([AssistantMessage(content="hello?")], [])
    assert len(server.requests) == 2
    assert server.answers == [text("never")]


async def test_a_slow_server_times_out_then_answers(server: AnthropicServer) -> None:
    server.answers += [Answer(hold=threading.Event()), text("on time")]
    reply = await llm_for(server, timeout=0.2).complete(HI, [])
    assert reply.content == "on time"
    assert len(server.requests) == 2


async def test_nobody_listening() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, never listening: connections are refused
        llm = AnthropicLLM("m", base_url=f"http://127.0.0.1:{port}", api_key="k", backoff=0.001, max_retries=2)
        with pytest.raises(LLMError, match="ConnectError after 3 attempts") as caught:
            await llm.complete(HI, [])
    assert retriable_llm_error(caught.value)


async def test_an_answer_that_is_not_a_message_is_an_llm_error(server: AnthropicServer) -> None:
    server.answers += [Answer(200, b"<html>proxy error</html>"), Answer(200, {"type": "message"})]
    with pytest.raises(LLMError, match="not JSON"):
        await llm_for(server).complete(HI, [])
    with pytest.raises(LLMError, match="no content blocks"):
        await llm_for(server).complete(HI, [])


# -- stream=True ----------------------------------------------------------------------


async def test_a_streamed_reply_is_the_reply_and_its_tokens(server: AnthropicServer, db_store: Store) -> None:
    answer = "Refund processed: $120 back to the card ending 4242."
    server.answers += [text(answer), streamed(text(answer))]
    plain = await llm_for(server).complete([UserMessage(content="Refund order 7.")], [])
    agent = Agent(name="refund-bot", llm=llm_for(server, stream=True), store=db_store)
    tokens, result = await follow(agent, "Refund order 7.", "streamed")
    assert result.status == "completed"
    assert result.output == plain.content == answer
    assert len(tokens) > 1  # it came in pieces, as they arrived
    assert (await journaled_turn(db_store, "streamed"))["content"] == "".join(tokens) == answer
    plain_body, streamed_body = (r["body"] for r in server.requests)
    assert streamed_body.pop("stream") is True
    assert "stream" not in plain_body
    assert streamed_body == plain_body


async def test_streamed_tool_calls_are_put_together(server: AnthropicServer, db_store: Store) -> None:
    two = tool_use(("lookup", {"order": 7}), ("approve_refund", {"amount": 120}), say="Checking.")
    server.answers += [streamed(two, size=3), streamed(text("Refunded $120."))]
    agent = Agent(name="refund-bot", llm=llm_for(server, stream=True), tools=[lookup, approve_refund],
                  store=db_store)
    tokens, result = await follow(agent, "Refund order 7.", "streamed-calls")
    assert result.status == "completed" and result.output == "Refunded $120."
    assert "".join(tokens) == "Checking.Refunded $120."  # both turns' text, live
    turn = await journaled_turn(db_store, "streamed-calls")
    assert turn["content"] == "Checking."
    assert [(c["id"], c["name"], c["arguments"]) for c in turn["tool_calls"]] == [
        ("toolu_0", "lookup", {"order": 7}), ("toolu_1", "approve_refund", {"amount": 120})]
    told = server.requests[1]["body"]["messages"]
    assert [m["role"] for m in told] == ["user", "assistant", "user"]
    assert [b["tool_use_id"] for b in told[2]["content"]] == ["toolu_0", "toolu_1"]
    assert json.loads(told[2]["content"][0]["content"]) == {"order": 7, "total": 120}


async def test_streamed_input_that_is_not_json_stays_text(server: AnthropicServer) -> None:
    server.answers.append(streamed(tool_use(("approve_refund", '{"amount": 5'), ("lookup", "[7]"), ("g", ""))))
    reply = await llm_for(server, stream=True).complete(HI, [])
    assert reply == AssistantMessage(content=None, tool_calls=[
        ToolCall("approve_refund", '{"amount": 5', id="toolu_0"), ToolCall("lookup", "[7]", id="toolu_1"),
        ToolCall("g", {}, id="toolu_2")])


async def test_a_stream_cut_short_is_sent_again(server: AnthropicServer, db_store: Store) -> None:
    answer = "Refund processed."
    # message_start, ping, a comment, the block's start, two pieces of text, then the connection drops.
    server.answers += [streamed(text(answer), drop_after=6), streamed(text(answer))]
    agent = Agent(name="refund-bot", llm=llm_for(server, stream=True), store=db_store)
    tokens, result = await follow(agent, "Refund order 7.", "dropped")
    assert result.status == "completed" and result.output == answer
    assert len(server.requests) == 2
    # A follower saw the failed attempt's tokens too; the journal has the last attempt's message only.
    assert "".join(tokens) == answer[:8] + answer
    assert (await journaled_turn(db_store, "dropped"))["content"] == answer


async def test_a_stream_without_message_stop_is_retried_then_fails(server: AnthropicServer) -> None:
    server.answers += [streamed(text("half"), end=False), streamed(text("whole"))]
    assert (await llm_for(server, stream=True).complete(HI, [])).content == "whole"
    server.answers += [streamed(text("a"), end=False), streamed(text("b"), drop_after=3)]
    with pytest.raises(LLMError, match="after 2 attempts") as caught:
        await llm_for(server, stream=True, max_retries=1).complete(HI, [])
    assert retriable_llm_error(caught.value)
    assert len(server.requests) == 4


async def test_an_overloaded_stream_is_retried_and_a_refused_one_is_not(server: AnthropicServer) -> None:
    overloaded = ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    start = streamed(text("x")).events[:1]  # type: ignore[index]
    server.answers += [Answer(events=[*start, overloaded]), streamed(text("hello"))]
    assert (await llm_for(server, stream=True).complete(HI, [])).content == "hello"
    assert len(server.requests) == 2
    server.answers += [Answer(events=[*start, overloaded])] * 2
    with pytest.raises(LLMError, match="streamed an error after 2 attempts: overloaded_error: Overloaded") as caught:
        await llm_for(server, stream=True, max_retries=1).complete(HI, [])
    assert caught.value.status == 529 and retriable_llm_error(caught.value)
    refused = ("error", {"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long"}})
    server.answers += [Answer(events=[*start, refused]), streamed(text("never"))]
    with pytest.raises(LLMError, match="streamed an error: invalid_request_error: prompt is too long") as caught:
        await llm_for(server, stream=True).complete(HI, [])
    assert caught.value.status == 400 and not retriable_llm_error(caught.value)
    assert len(server.requests) == 5


async def test_streaming_retries_before_the_first_byte_and_refuses_a_4xx(server: AnthropicServer) -> None:
    server.answers += [error(429, "rate_limit_error", "slow down", {"retry-after": "0"}),
                       error(529, "overloaded_error", "Overloaded"), streamed(text("hello"))]
    llm = llm_for(server, stream=True)
    assert (await llm.complete(HI, [])).content == "hello"
    assert len(server.requests) == 3
    server.answers += [error(404, "not_found_error", "model: claude-nope"), streamed(text("never"))]
    with pytest.raises(LLMError, match=r"answered 404 \(attempt 1\): not_found_error: model: claude-nope") as caught:
        await llm.complete(HI, [])
    assert caught.value.status == 404
    assert len(server.requests) == 4


async def test_a_server_that_does_not_stream_is_read_whole(server: AnthropicServer, db_store: Store) -> None:
    server.answers.append(text("all at once"))
    async with llm_for(server, stream=True) as llm:
        agent = Agent(name="bot", llm=llm, store=db_store)
        tokens, result = await follow(agent, "hi", "whole")
    assert result.output == "all at once"
    assert tokens == ["all at once"]
