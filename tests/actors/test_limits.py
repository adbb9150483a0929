"""LLMLimit: calls and tokens per window counted in the execution's store, shared by name; 429s block everyone."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from tether.actors import Agent, LLMError, LLMLimit, OpenAIChatLLM, ScriptedLLM, ToolCall, UserMessage
from tether.stores import ConfigurationError, Store

from ._chat_server import Answer, ChatServer

HOUR = timedelta(hours=1)


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with ChatServer() as running:
        yield running


def answer(text: str, tokens: int) -> Answer:
    return Answer(body={"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": tokens - 1, "completion_tokens": 1}})


def lookup(order: str) -> str:
    """Look an order up."""
    return f"order {order}: shipped"


async def test_calls_are_counted_in_the_store_under_one_name(store: Store) -> None:
    limited = LLMLimit(ScriptedLLM([ToolCall("lookup", {"order": "A1"}), "Shipped."]), requests=2, per=HOUR)
    assert limited.name == "tether:scripted"
    agent = Agent("clerk", llm=limited, tools=[lookup], store=store)
    done = await agent.run("Where is A1?", execution_id="l1")
    assert done.status == "completed" and done.output == "Shipped."
    # Two calls this hour, by any process: the next one, under the same name, waits for the next hour.
    wait = await store.take_llm_quota("tether:scripted", requests=2, tokens=None, per_seconds=HOUR.total_seconds())
    assert 0 < wait <= HOUR.total_seconds()
    assert await store.take_llm_quota("other:model", requests=2, tokens=None, per_seconds=3600) == 0


async def test_a_full_window_makes_the_next_call_wait_for_the_next(store: Store) -> None:
    called: list[float] = []

    class Stamped(ScriptedLLM):
        async def complete(self, messages: Any, tools: Any) -> Any:
            called.append(time.time())
            return await super().complete(messages, tools)

    per = 0.5
    script = [ToolCall("lookup", {"order": "A1"}), ToolCall("lookup", {"order": "A2"}), "Both shipped."]
    agent = Agent("clerk", llm=LLMLimit(Stamped(script), requests=1, per=timedelta(seconds=per)),
                  tools=[lookup], store=store)
    assert (await agent.run("Where are A1 and A2?", execution_id="l2")).status == "completed"
    windows = [int(at // per) for at in called]
    assert len(windows) == 3 and len(set(windows)) == 3  # one call per window, each in its own


async def test_tokens_reported_by_the_reply_fill_the_window(server: ChatServer, store: Store) -> None:
    server.answers.append(answer("Shipped.", tokens=25))
    async with LLMLimit(OpenAIChatLLM("test-model", base_url=server.url, api_key="sk"), tokens=25,
                        per=HOUR) as limited:
        agent = Agent("clerk", llm=limited, store=store)
        assert (await agent.run("Where is A1?", execution_id="l3")).status == "completed"
    assert limited.name == "openai:test-model"
    assert await store.take_llm_quota("openai:test-model", requests=None, tokens=25, per_seconds=3600) > 0


async def test_a_429_blocks_the_limit_for_its_retry_after(server: ChatServer, store: Store) -> None:
    server.answers += [Answer(429, {"error": {"message": "slow down"}}, {"retry-after": "1"}), answer("Shipped.", 9)]
    async with LLMLimit(OpenAIChatLLM("test-model", base_url=server.url, api_key="sk", max_retries=0),
                        requests=100, per=HOUR) as limited:
        agent = Agent("clerk", llm=limited, store=store)
        began = time.monotonic()
        done = await agent.run("Where is A1?", execution_id="l4")
    # The 429 failed the turn; the turn ran again (the agent's message is handled again), once the block
    # the 429 put on the limit, for every process, had lifted.
    assert done.status == "completed" and done.output == "Shipped."
    assert len(server.requests) == 2
    assert time.monotonic() - began >= 0.9


async def test_outside_an_execution_nothing_is_counted() -> None:
    limited = LLMLimit(ScriptedLLM(["Hello."]), requests=1, per=HOUR)
    for _ in range(3):
        assert (await limited.complete([UserMessage(content="Hi")], [])).content == "Hello."


@pytest.mark.parametrize(("options", "message"), [
    ({}, "needs requests=, tokens= or both"),
    ({"requests": 0}, "requests=0"),
    ({"tokens": -5}, "tokens=-5"),
    ({"requests": 5, "per": timedelta(0)}, "give a positive timedelta"),
    ({"requests": 5, "per": 60}, "give a positive timedelta"),
])
def test_bad_limits_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        LLMLimit(ScriptedLLM(["x"]), **options)


def test_an_llm_error_carries_the_retry_after() -> None:
    assert LLMError("busy", status=429, retry_after=3.0).retry_after == 3.0
