"""OpenAIChatLLM against a real local HTTP server that speaks chat completions (no network)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from tether.actors import Agent, LLMError, OpenAIChatLLM, ToolCall, UserMessage
from tether.actors._messages import AssistantMessage, SystemMessage, ToolMessage, ToolSpec
from tether.runtime import Resume, interrupt
from tether.stores import Store

from ._chat_server import Answer, ChatServer, calls, streamed, text
from ._scripted_server import follow, journaled_turn


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with ChatServer() as running:
        yield running


def llm_for(server: ChatServer, **options: Any) -> OpenAIChatLLM:
    return OpenAIChatLLM("test-model", base_url=server.url, api_key="sk-test", backoff=0.001, **options)


def approve_refund(amount: int) -> dict[str, Any]:
    """Approve a refund."""
    if amount > 10_000:
        return {"approved": interrupt("manager_approval", {"amount": amount}).approved}
    return {"approved": True}


async def test_an_agent_over_the_wire(server: ChatServer, store: Store) -> None:
    server.answers += [calls(("approve_refund", '{"amount": 50000}')), text("Refund processed.")]
    async with llm_for(server, temperature=0) as llm:
        agent = Agent(name="refund-bot", system_prompt="Be brief.", llm=llm, tools=[approve_refund], store=store)
        paused = await agent.run("Process a $50k refund.", execution_id="wire")
        assert paused.status == "paused"
        done = await agent.resume("wire", Resume(approved=True))
    assert done.status == "completed"
    assert done.output == "Refund processed."
    assert len(server.requests) == 2  # the resume did not ask turn 1 again
    first, second = (r["body"] for r in server.requests)
    assert server.requests[0]["path"] == "/v1/chat/completions"
    assert server.headers[0]["Authorization"] == "Bearer sk-test"
    assert first["model"] == "test-model" and first["temperature"] == 0
    assert first["messages"] == [{"role": "system", "content": "Be brief."},
                                 {"role": "user", "content": "Process a $50k refund."}]
    assert first["tools"][0]["function"]["name"] == "approve_refund"
    assert first["tools"][0]["function"]["parameters"]["required"] == ["amount"]
    assert second["messages"][2] == {
        "role": "assistant", "content": None,
        "tool_calls": [{"id": "srv_0", "type": "function",
                        "function": {"name": "approve_refund", "arguments": '{"amount": 50000}'}}],
    }
    assert second["messages"][3] == {"role": "tool", "tool_call_id": "srv_0", "content": '{"approved": true}'}


async def test_rate_limits_and_server_errors_are_retried(server: ChatServer) -> None:
    server.answers += [Answer(429, {"error": "slow down"}, {"retry-after": "0"}),
                       Answer(503, {"error": "busy"}), text("hello")]
    reply = await llm_for(server).complete([UserMessage(content="hi")], [])
    assert reply.content == "hello"
    assert len(server.requests) == 3


async def test_retries_run_out(server: ChatServer) -> None:
    server.answers += [Answer(500, {"error": "down"}), Answer(500, {"error": "still down"})]
    with pytest.raises(LLMError, match=r"answered 500 \(attempt 2\): .*still down") as caught:
        await llm_for(server, max_retries=1).complete([UserMessage(content="hi")], [])
    assert caught.value.status == 500
    assert len(server.requests) == 2


async def test_a_client_error_is_not_retried(server: ChatServer) -> None:
    server.answers += [Answer(400, {"error": {"message": "unknown model"}}), text("never")]
    with pytest.raises(LLMError, match=r"answered 400.*unknown model"):
        await llm_for(server).complete([UserMessage(content="hi")], [])
    assert len(server.requests) == 1


async def test_a_slow_server_times_out_then_answers(server: ChatServer) -> None:
    server.answers += [Answer(hold=threading.Event()), text("on time")]
    reply = await llm_for(server, timeout=0.2).complete([UserMessage(content="hi")], [])
    assert reply.content == "on time"
    assert len(server.requests) == 2


async def test_nobody_listening() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, never listening: connections are refused
        llm = OpenAIChatLLM("m", base_url=f"http://127.0.0.1:{port}/v1", backoff=0.001, max_retries=2)
        with pytest.raises(LLMError, match="ConnectError after 3 attempts"):
            await llm.complete([UserMessage(content="hi")], [])


async def test_arguments_that_are_not_json_go_back_to_the_llm(server: ChatServer, store: Store) -> None:
    server.answers += [calls(("approve_refund", '{"amount": 5')), text("gave up")]
    agent = Agent(name="a", llm=llm_for(server), tools=[approve_refund], store=store)
    result = await agent.run("Refund.", execution_id="bad-json")
    assert result.status == "completed"
    told = server.requests[1]["body"]["messages"][-1]
    assert told["role"] == "tool"
    assert "not a JSON object" in told["content"]


async def test_every_message_kind_goes_on_the_wire(server: ChatServer) -> None:
    server.answers.append(text("ok"))
    conversation = [
        SystemMessage(content="s"), UserMessage(content="u"),
        AssistantMessage(content="thinking", tool_calls=[ToolCall("f", {"x": 1}, id="c1")]),
        ToolMessage(tool_call_id="c1", name="f", content="2"),
    ]
    await llm_for(server).complete(conversation, [ToolSpec(name="f", description="adds one")])
    body = server.requests[0]["body"]
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "tool"]
    assert json.loads(body["messages"][2]["tool_calls"][0]["function"]["arguments"]) == {"x": 1}
    assert body["tools"] == [{"type": "function", "function": {
        "name": "f", "description": "adds one", "parameters": {"type": "object", "properties": {}}}}]


async def test_every_5xx_is_retried_and_a_non_json_answer_is_an_llm_error(server: ChatServer) -> None:
    server.answers += [Answer(529, {"error": "overloaded"}), Answer(200, b"<html>proxy error</html>")]
    llm = llm_for(server)
    with pytest.raises(LLMError, match="not JSON"):
        await llm.complete([UserMessage(content="hi")], [])
    assert len(server.requests) == 2


# -- stream=True ----------------------------------------------------------------------


def lookup(order: int) -> dict[str, Any]:
    """Look an order up."""
    return {"order": order, "total": 120}


async def test_a_streamed_reply_is_the_reply_and_its_tokens(server: ChatServer, store: Store) -> None:
    answer = "Refund processed: $120 back to the card ending 4242."
    server.answers += [text(answer), streamed(text(answer))]
    plain = await llm_for(server).complete([UserMessage(content="Refund order 7.")], [])
    agent = Agent(name="refund-bot", llm=llm_for(server, stream=True), store=store)
    tokens, result = await follow(agent, "Refund order 7.", "streamed")
    assert result.status == "completed"
    assert result.output == plain.content == answer
    assert len(tokens) > 1  # it came in pieces, as they arrived
    assert (await journaled_turn(store, "streamed"))["content"] == "".join(tokens) == answer
    plain_body, streamed_body = (r["body"] for r in server.requests)
    assert streamed_body.pop("stream") is True
    assert "stream" not in plain_body
    assert streamed_body == plain_body


async def test_streamed_tool_calls_are_put_together(server: ChatServer, store: Store) -> None:
    two = calls(("lookup", '{"order": 7}'), ("approve_refund", '{"amount": 120}'))
    server.answers += [streamed(two), streamed(text("Refunded $120."))]
    agent = Agent(name="refund-bot", llm=llm_for(server, stream=True), tools=[lookup, approve_refund], store=store)
    tokens, result = await follow(agent, "Refund order 7.", "streamed-calls")
    assert result.status == "completed" and result.output == "Refunded $120."
    assert "".join(tokens) == "Refunded $120."  # the tool-call turn has no text to stream
    turn = await journaled_turn(store, "streamed-calls")
    assert turn["content"] is None
    assert [(c["id"], c["name"], c["arguments"]) for c in turn["tool_calls"]] == [
        ("srv_0", "lookup", {"order": 7}), ("srv_1", "approve_refund", {"amount": 120})]
    told = server.requests[1]["body"]["messages"]
    assert [(m["role"], m.get("tool_call_id")) for m in told[-2:]] == [("tool", "srv_0"), ("tool", "srv_1")]
    assert json.loads(told[-2]["content"]) == {"order": 7, "total": 120}
    assert json.loads(told[-1]["content"]) == {"approved": True}


async def test_streamed_arguments_that_are_not_json_stay_text(server: ChatServer) -> None:
    server.answers.append(streamed(calls(("approve_refund", '{"amount": 5'), ("lookup", "[7]"))))
    reply = await llm_for(server, stream=True).complete([UserMessage(content="hi")], [])
    assert reply == AssistantMessage(content=None, tool_calls=[
        ToolCall("approve_refund", '{"amount": 5', id="srv_0"), ToolCall("lookup", "[7]", id="srv_1")])


async def test_a_stream_cut_short_is_sent_again(server: ChatServer, store: Store) -> None:
    answer = "Refund processed."
    # The first attempt streams two pieces of text, then the connection drops mid-event.
    server.answers += [streamed(text(answer), drop_after=4), streamed(text(answer))]
    agent = Agent(name="refund-bot", llm=llm_for(server, stream=True), store=store)
    tokens, result = await follow(agent, "Refund order 7.", "dropped")
    assert result.status == "completed" and result.output == answer
    assert len(server.requests) == 2
    # A follower saw the failed attempt's tokens too; the journal has the last attempt's message only.
    assert "".join(tokens) == answer[:8] + answer
    assert (await journaled_turn(store, "dropped"))["content"] == answer


async def test_a_stream_without_an_end_is_retried_then_fails(server: ChatServer) -> None:
    server.answers += [streamed(text("half"), end=False), streamed(text("whole"))]
    assert (await llm_for(server, stream=True).complete([UserMessage(content="hi")], [])).content == "whole"
    server.answers += [streamed(text("a"), end=False), streamed(text("b"), drop_after=3)]
    with pytest.raises(LLMError, match="after 2 attempts"):
        await llm_for(server, stream=True, max_retries=1).complete([UserMessage(content="hi")], [])
    assert len(server.requests) == 4


async def test_streaming_retries_before_the_first_byte_and_refuses_a_4xx(server: ChatServer) -> None:
    server.answers += [Answer(429, {"error": "slow down"}, {"retry-after": "0"}), Answer(502, {"error": "gateway"}),
                       streamed(text("hello"))]
    llm = llm_for(server, stream=True)
    assert (await llm.complete([UserMessage(content="hi")], [])).content == "hello"
    assert len(server.requests) == 3
    server.answers += [Answer(400, {"error": {"message": "unknown model"}}), streamed(text("never"))]
    with pytest.raises(LLMError, match=r"answered 400 \(attempt 1\): .*unknown model") as caught:
        await llm.complete([UserMessage(content="hi")], [])
    assert caught.value.status == 400
    assert len(server.requests) == 4


async def test_an_error_in_the_stream_is_an_llm_error(server: ChatServer) -> None:
    server.answers.append(Answer(events=[{"error": {"message": "context length exceeded"}}], done=False))
    with pytest.raises(LLMError, match=r"streamed an error: .*context length exceeded"):
        await llm_for(server, stream=True).complete([UserMessage(content="hi")], [])
    assert len(server.requests) == 1


async def test_a_server_that_does_not_stream_is_read_whole(server: ChatServer) -> None:
    server.answers.append(text("all at once"))
    async with llm_for(server, stream=True) as llm:
        assert (await llm.complete([UserMessage(content="hi")], [])).content == "all at once"
