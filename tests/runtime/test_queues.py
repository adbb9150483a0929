"""Queues from the public API: declared, started into, served by a worker; bad input refused with nothing enqueued."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import anyio.lowlevel
import pytest
from tether.actors import Agent, Chain, ScriptedLLM
from tether.runtime import ExecutionWorker, Queue, Rate
from tether.stores import ConfigurationError, Lease, MemoryStore, Store


def unique(prefix: str = "q") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class Gauge:
    """How many nodes run at once, and the most that ever did."""

    def __init__(self) -> None:
        self.now = 0
        self.peak = 0
        self.ran: list[str] = []
        self.paired = anyio.Event()

    async def node(self, state: dict[str, Any]) -> dict[str, Any]:
        self.now += 1
        self.peak = max(self.peak, self.now)
        if self.now >= 2:
            self.paired.set()
        with anyio.fail_after(30):  # the first waits for a second to run beside it (a queue of 1 never lets it)
            await self.paired.wait()
        for _ in range(20):  # room for a third to come in, were the limit not kept
            await anyio.lowlevel.checkpoint()
        self.now -= 1
        self.ran.append(state["n"])
        return {"done": True}


async def test_a_worker_runs_a_queue_within_its_concurrency(store: Store) -> None:
    gauge = Gauge()
    chain = Chain("job", [gauge.node], store=store)
    queue = Queue(unique(), concurrency=2)
    for n in range(6):
        queued = await chain.start({"n": f"j{n}"}, execution_id=f"j{n}", queue=queue)
        assert queued.status == "queued"
    async with ExecutionWorker(store, [chain], concurrency=10, queues=[queue], notify=False) as worker:
        await worker.serve(until_idle=True)
    assert sorted(gauge.ran) == [f"j{n}" for n in range(6)]  # each once
    assert gauge.peak == 2  # never more, and the queue did let two run at once
    for n in range(6):
        execution = await store.get_execution(f"j{n}")
        assert execution is not None and execution.status == "completed" and execution.queue == queue.name


class SlowToSayFull(MemoryStore):
    """A store whose "the queue is full" comes back only after the runs that filled it have ended."""

    def __init__(self) -> None:
        super().__init__()
        self.refused = anyio.Event()
        self.ended = anyio.Event()

    async def take_queued(self, queue: str, **kwargs: Any) -> list[Lease]:
        taken = await super().take_queued(queue, **kwargs)
        if not taken and not self.ended.is_set():
            self.refused.set()
            await self.ended.wait()
        return taken


async def test_until_idle_does_not_stop_on_a_refusal_that_the_ending_runs_made_stale() -> None:
    store = SlowToSayFull()
    ran: list[str] = []
    results: list[object] = []

    async def node(state: dict[str, Any]) -> dict[str, Any]:
        ran.append(state["n"])
        if state["n"] != "j2":
            await store.refused.wait()  # the worker has asked for more and been told "full"
        return {}

    def on_result(result: object) -> None:
        results.append(result)
        if len(results) == 2:
            store.ended.set()  # both ended (nothing awaits between here and the worker's bookkeeping)

    chain = Chain("job", [node], store=store)
    queue = Queue(unique(), concurrency=2)
    for n in range(3):
        await chain.start({"n": f"j{n}"}, execution_id=f"j{n}", queue=queue)
    with anyio.fail_after(30):
        async with ExecutionWorker(store, [chain], concurrency=10, queues=[queue], notify=False,
                                   poll_interval=0.01, on_result=on_result) as worker:
            await worker.serve(until_idle=True)
    assert sorted(ran) == ["j0", "j1", "j2"]


async def test_a_start_records_its_key_and_priority(store: Store) -> None:
    chain = Chain("job", [lambda state: {"done": True}], store=store)
    queue = Queue(unique(), per_key=1, priority=True)
    await chain.start({}, execution_id="k1", queue=queue.name, key="tenant-7", priority=5)
    execution = await store.get_execution("k1")
    assert execution is not None
    assert (execution.queue, execution.queue_key, execution.priority, execution.status) == (
        queue.name, "tenant-7", 5, "queued")
    [row] = [r for r in await store.queue_stats() if r.queue == queue.name and r.key == "tenant-7"]
    assert (row.waiting, row.running) == (1, 0)


def test_declarations_with_bad_limits_are_refused() -> None:
    name = unique()
    with pytest.raises(ConfigurationError, match=r"concurrency=0\): give a whole number, 1 or more"):
        Queue(name, concurrency=0)
    with pytest.raises(ConfigurationError, match=r"per_key=-2"):
        Queue(name, per_key=-2)
    with pytest.raises(ConfigurationError, match=r"Rate\(limit=0\)"):
        Rate(0, per=timedelta(minutes=1))
    with pytest.raises(ConfigurationError, match=r"give a positive timedelta"):
        Rate(10, per=timedelta(0))
    with pytest.raises(ConfigurationError, match=r"give a Rate"):
        Queue(name, rate=10)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="must not contain '/'"):
        Queue("a/b")
    Queue(name, concurrency=3)
    Queue(name, concurrency=3)  # the same again: one queue
    with pytest.raises(ConfigurationError, match="declared twice in this process, with other limits"):
        Queue(name, concurrency=4)


@pytest.mark.parametrize(("options", "message"), [
    ({"queue": "nowhere"}, "No queue 'nowhere' is declared in this process"),
    ({"key": "tenant-7"}, "give queue= too"),
    ({"priority": 3}, "give queue= too"),
    ({"queue": "PLAIN", "priority": 3}, "which has no priorities"),
    ({"queue": "RANKED", "priority": -1}, "from 0 \\(first\\) to 2147483647"),
    ({"queue": "RANKED", "priority": 2**31}, "from 0 \\(first\\) to 2147483647"),
    ({"queue": "PLAIN", "key": ""}, "a key is a non-empty string"),
    ({"queue": "PLAIN", "detach": False}, "its starts are detached"),
])
async def test_a_bad_start_enqueues_nothing(store: Store, options: dict[str, Any], message: str) -> None:
    plain, ranked = Queue(unique("plain")), Queue(unique("ranked"), priority=True)
    names = {"PLAIN": plain.name, "RANKED": ranked.name}
    if "queue" in options:
        options = {**options, "queue": names.get(options["queue"], options["queue"])}
    chain = Chain("job", [lambda state: {"done": True}], store=store)
    with pytest.raises(ConfigurationError, match=message):
        await chain.start({}, execution_id="bad", **options)
    assert await store.get_execution("bad") is None


async def test_an_agent_starts_into_a_queue(store: Store) -> None:
    agent = Agent("support", llm=ScriptedLLM(["Your refund is on its way."]), store=store)
    queue = Queue(unique(), concurrency=1, priority=True)
    await agent.start("Where is my refund?", execution_id="a1", queue=queue, key="tenant-7", priority=2)
    execution = await store.get_execution("a1")
    assert execution is not None and (execution.queue, execution.queue_key, execution.priority) == (
        queue.name, "tenant-7", 2)
    async with ExecutionWorker(store, [agent], notify=False, queues=[queue]) as worker:
        await worker.serve(until_idle=True)
    done = await store.get_execution("a1")
    assert done is not None and done.status == "completed" and done.result == "Your refund is on its way."
