"""Metrics through the OpenTelemetry metrics API, and the library's logs through `logging`."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest
from tether.actors import Chain
from tether.runtime import ExecutionWorker, Queue, Resume, RetryPolicy
from tether.stores import Store

from ._programs import build
from .conftest import Traced


def by(points: list[Any], attribute: str) -> dict[str, int]:
    return {point.attributes[attribute]: point.value for point in points}


async def test_boundaries_statuses_and_resume_latency(traced: Traced, store: Store) -> None:
    support = build(store)
    await support.run("Check refund R1.", execution_id="m1")
    await support.resume("m1", Resume(approved=True))
    statuses = by(traced.points("tether.executions"), "tether.status")
    assert statuses == {"paused": 1, "completed": 1}
    # Every journal entry is counted once: boundaries, steps, the suspension, the decision, the verdicts.
    assert sum(point.value for point in traced.points("tether.boundaries")) == len(await store.read_journal("m1"))
    [latency] = traced.points("tether.resume.latency")
    assert latency.count == 1 and 0 <= latency.sum < 60


attempts = 0


async def flaky(state: dict[str, Any]) -> dict[str, Any]:
    global attempts
    attempts += 1
    if attempts < 3:
        raise ConnectionError("the ledger is down")
    return {"booked": True}


async def test_retries_are_counted(traced: Traced, store: Store) -> None:
    global attempts
    attempts = 0
    chain = Chain("book", store=store)
    chain.add_node(flaky, retry=RetryPolicy(initial=0.001, jitter=0))
    assert (await chain.run({}, execution_id="m2")).status == "completed"
    assert by(traced.points("tether.retries"), "tether.agent_path") == {"chain:book": 2}


async def test_logs_carry_the_execution_and_nothing_is_printed(traced: Traced, store: Store,
                                                               caplog: pytest.LogCaptureFixture,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    support = build(store)
    with caplog.at_level(logging.DEBUG, logger="tether"):
        await support.run("Check refund R1.", execution_id="m3")
        await support.resume("m3", Resume(approved=True))
    ours = [record for record in caplog.records if record.name.startswith("tether")]
    assert [(r.name, getattr(r, "execution_id", None), getattr(r, "agent_path", None), getattr(r, "status", None))
            for r in ours] == [("tether.runtime", "m3", "supervisor:planner", "paused"),
                               ("tether.runtime", "m3", "supervisor:planner", "completed")]
    assert capsys.readouterr() == ("", "")


async def test_a_worker_reports_what_waits_for_a_decision(traced: Traced, store: Store) -> None:
    support = build(store)
    await support.run("Check refund R1.", execution_id="m4")
    async with ExecutionWorker(store, [support], notify=False) as worker:
        await worker.serve(until_idle=True)  # nothing to run: it only looks
    [pending] = traced.points("tether.interrupts.pending")
    [age] = traced.points("tether.interrupts.oldest_age")
    assert pending.value == 1 and 0 <= age.value < 60


async def test_queue_depth_and_wait(traced: Traced, store: Store) -> None:
    queue = Queue(f"metered-{uuid.uuid4().hex[:6]}", concurrency=2)
    chain = Chain("job", [lambda state: {"done": True}], store=store)
    for n in range(3):
        await chain.start({}, execution_id=f"w{n}", queue=queue)
    async with ExecutionWorker(store, [chain], notify=False, queues=[queue]) as worker:
        await worker.serve(until_idle=True)
    [wait] = traced.points("tether.queue.wait")
    assert wait.count == 3 and wait.attributes == {"tether.queue": queue.name}
    [waiting] = [p for p in traced.points("tether.queue.waiting") if p.attributes["tether.queue"] == queue.name]
    assert waiting.value == 3  # counted before the first admission
