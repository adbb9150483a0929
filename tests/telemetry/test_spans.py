"""The spans of executions, read back from the OpenTelemetry SDK's in-memory exporter."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from tether.actors import Agent, Chain, OpenAIChatLLM
from tether.runtime import ExecutionWorker, Resume, sleep, telemetry
from tether.runtime.testing import Clock
from tether.stores import Store

from ..actors._chat_server import Answer, ChatServer
from ._programs import build
from .conftest import Traced

Shape = tuple[str, list[Any]]


def shape(spans: list[ReadableSpan], root: ReadableSpan) -> Shape:
    """``root``'s name and its children's shapes, sorted: concurrent children start in any order."""
    children = [s for s in spans if s.parent is not None and s.parent.span_id == root.context.span_id]
    return root.name, sorted(shape(spans, child) for child in children)


def only(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    [span] = [s for s in spans if s.name == name]
    return span


def chat() -> Shape:
    return "turn", [("chat scripted", [])]


async def test_a_supervisor_whose_worker_pauses_is_one_trace_across_its_resume(traced: Traced, store: Store) -> None:
    support = build(store)
    paused = await support.run("Check refund R1.", execution_id="r1")
    assert paused.status == "paused"
    first = traced.take()
    run = only(first, "run Supervisor[planner]")
    assert run.parent is None
    assert shape(first, run) == ("run Supervisor[planner]", [("supervisor:planner Start", sorted([
        chat(), ("delegate", []), ("delegate", []),
        ("reply", [("worker:researcher Task", sorted([chat(), ("execute_tool search", []), chat()]))]),
        ("reply", [("worker:auditor Task", sorted([chat(), ("execute_tool approve_refund", []), ("interrupt", [])]))]),
    ]))])
    assert len(first) == 19  # every span is in the tree: none went astray
    assert run.attributes is not None and run.attributes["tether.status"] == "paused"
    assert run.attributes["tether.execution_id"] == "r1"
    assert run.attributes["tether.agent_path"] == "supervisor:planner"
    paused_spans = {s.name for s in first if s.attributes and s.attributes.get("tether.paused")}
    assert paused_spans == {"supervisor:planner Start", "reply", "worker:auditor Task", "execute_tool approve_refund"}
    assert all(s.status.status_code is not StatusCode.ERROR for s in first)  # a pause is not an error
    interrupted = only(first, "interrupt")
    assert interrupted.attributes is not None
    assert interrupted.attributes["tether.interrupt.path"] == "supervisor:planner/worker:auditor/tool:approve_refund"
    assert interrupted.attributes["tether.interrupt.reason"] == "manager_approval"

    # The execution keeps its trace context: whoever continues it continues the trace.
    row = await store.get_execution("r1")
    assert row is not None and row.trace == f"00-{run.context.trace_id:032x}-{run.context.span_id:016x}-03"

    done = await support.resume("r1", Resume(approved=True))
    assert done.status == "completed"
    second = traced.take()
    resumed = only(second, "resume Supervisor[planner]")
    assert resumed.context.trace_id == run.context.trace_id
    assert resumed.parent is not None and resumed.parent.span_id == run.context.span_id
    assert {s.context.trace_id for s in second} == {run.context.trace_id}
    # Only what ran again has a span: the researcher's work and the planner's first turn are replayed.
    assert shape(second, resumed) == ("resume Supervisor[planner]", [("supervisor:planner Start", sorted([
        ("reply", []), chat(),
        ("worker:auditor Task", sorted([("execute_tool approve_refund", []), chat()])),
    ]))])
    assert resumed.attributes is not None and resumed.attributes["tether.status"] == "completed"


def fails(state: dict[str, Any]) -> dict[str, Any]:
    raise ValueError("card declined")


async def test_an_error_is_recorded_on_the_span_it_left(traced: Traced, store: Store) -> None:
    chain = Chain("pay", [fails], store=store)
    result = await chain.run({}, execution_id="p1")
    assert result.status == "failed"
    spans = traced.spans()
    node = only(spans, "node fails")
    assert node.status.status_code is StatusCode.ERROR
    assert node.status.description == "ValueError: card declined"
    assert [event.name for event in node.events] == ["exception"]
    assert node.events[0].attributes is not None
    assert node.events[0].attributes["exception.type"] == "ValueError"
    run = only(spans, "run Chain[pay]")
    assert run.attributes is not None and run.attributes["tether.status"] == "failed"


async def napping(state: dict[str, Any]) -> dict[str, Any]:
    await sleep(timedelta(hours=1).total_seconds())
    return {"rested": True}


async def test_a_durable_sleep_and_the_run_that_wakes_from_it(traced: Traced, store: Store) -> None:
    with Clock() as clock:
        chain = Chain("nap", [napping], store=store)
        parked = await chain.run({}, execution_id="n1")
        assert parked.status == "paused"
        first = traced.take()
        nap = only(first, "sleep")
        assert nap.attributes is not None and nap.attributes["tether.agent_path"] == "chain:nap"
        clock.advance(timedelta(hours=2))
        done = await chain.resume("n1")
        assert done.status == "completed"
    woke = only(traced.take(), "wake Chain[nap]")
    assert woke.context.trace_id == only(first, "run Chain[nap]").context.trace_id


async def test_a_detached_start_continues_in_the_trace_of_the_caller(traced: Traced, store: Store) -> None:
    chain = Chain("later", [lambda state: {"done": True}], store=store)
    queued = await chain.start({}, execution_id="q1", detach=True)
    assert queued.status == "queued"
    [enqueued] = traced.take()
    assert enqueued.name == "enqueue Chain[later]"
    assert enqueued.attributes is not None and enqueued.attributes["tether.status"] == "queued"
    async with ExecutionWorker(store, [chain], notify=False) as worker:
        await worker.serve(until_idle=True)
    execution = await store.get_execution("q1")
    assert execution is not None and execution.status == "completed"
    started = only(traced.take(), "start Chain[later]")
    assert started.parent is not None and started.parent.span_id == enqueued.context.span_id


def checked(state: dict[str, Any]) -> dict[str, Any]:
    return {"ok": True}


def done(state: dict[str, Any]) -> dict[str, Any]:
    return {"done": True}  # the last node: its record goes with the outcome, not in an append


async def test_store_calls_are_timed_and_optionally_traced(traced: Traced, db_store: Store) -> None:
    chain = Chain("one", [checked, done], store=db_store)
    await chain.run({}, execution_id="s1")
    assert not [s for s in traced.take() if s.name.startswith("store ")]  # off by default
    durations = {p.attributes["tether.store.operation"]: p.count for p in traced.points("tether.store.duration")}
    assert durations["start_execution"] == 1 and durations["append"] >= 2
    system = "postgresql" if "Postgres" in type(db_store).__name__ else "sqlite"
    assert {p.attributes["db.system.name"] for p in traced.points("tether.store.duration")} == {system}

    telemetry.enable(traced.tracer_provider, traced.meter_provider, store_spans=True)
    await Chain("two", [checked, done], store=db_store).run({}, execution_id="s2")
    spans = traced.take()
    appended = [s for s in spans if s.name == "store append"]
    assert appended, [s.name for s in spans]
    handling = only(spans, "chain:two Start")  # a step's result is journaled by its message, after the step
    assert any(s.parent is not None and s.parent.span_id == handling.context.span_id for s in appended)


def chat_answer(content: str) -> Answer:
    return Answer(body={"id": "chatcmpl-7", "model": "test-model-0613", "usage": {"prompt_tokens": 21,
                        "completion_tokens": 4}, "choices": [{"message": {"role": "assistant", "content": content},
                                                              "finish_reason": "stop"}]})


@pytest.fixture
def server() -> Any:
    with ChatServer() as running:
        yield running


async def test_an_llm_call_has_the_genai_attributes_and_no_content(traced: Traced, server: ChatServer,
                                                                    store: Store) -> None:
    server.answers.append(chat_answer("Refund R1 is within policy."))
    secret = "customer card 4242 4242 4242 4242"
    async with OpenAIChatLLM("test-model", base_url=server.url, api_key="sk-test") as llm:
        agent = Agent("clerk", system_prompt="Be brief.", llm=llm, store=store)
        done = await agent.run(f"Check refund R1 for {secret}.", execution_id="c1")
    assert done.status == "completed"
    spans = traced.spans()
    call = only(spans, "chat test-model")
    assert call.attributes is not None
    assert dict(call.attributes) == {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "test-model",
        "gen_ai.usage.input_tokens": 21, "gen_ai.usage.output_tokens": 4, "gen_ai.response.finish_reasons": ("stop",),
        "gen_ai.response.model": "test-model-0613", "gen_ai.response.id": "chatcmpl-7",
    }
    turn = only(spans, "turn")
    assert call.parent is not None and call.parent.span_id == turn.context.span_id
    assert not any("4242" in str(value) for span in spans for value in (span.attributes or {}).values())
    tokens = {p.attributes["gen_ai.token.type"]: p.sum for p in traced.points("gen_ai.client.token.usage")}
    assert tokens == {"input": 21, "output": 4}


async def test_content_is_recorded_only_when_asked_and_cut_to_the_limit(traced: Traced, server: ChatServer,
                                                                        store: Store) -> None:
    telemetry.enable(traced.tracer_provider, traced.meter_provider, record_content=True, content_limit=60)
    server.answers.append(chat_answer("Refund R1 is within policy, and the customer was told so at once."))
    async with OpenAIChatLLM("test-model", base_url=server.url, api_key="sk-test") as llm:
        agent = Agent("clerk", system_prompt="Be brief.", llm=llm, store=store)
        await agent.run("Check refund R1.", execution_id="c2")
    call = only(traced.spans(), "chat test-model")
    assert call.attributes is not None
    sent, answered = str(call.attributes["gen_ai.input.messages"]), str(call.attributes["gen_ai.output.messages"])
    assert sent.startswith('[{"role":"system","content":"Be brief."}') and sent.endswith("...")
    assert len(sent) == 63 and len(answered) == 63
    assert "Refund R1 is within policy" in answered
