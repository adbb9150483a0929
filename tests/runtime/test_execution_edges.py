"""Edge cases of executions found in review: each a scenario that once went wrong."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from pydantic import BaseModel
from tether.runtime import Actor, ActorCrashed, Resume, Runtime, Start, interrupt
from tether.stores import LeaseHeld, Store, UsageError


class Add(BaseModel):
    n: int


class Total(BaseModel):
    total: int = 0


class Ledger(Actor[Total]):
    kind = "ledger"
    messages = (Add,)

    async def receive(self, message: Add) -> Any:
        self.state.total += message.n
        return self.state.total


class Order(Actor[BaseModel]):
    """Each execution asks the shared ledger to add its input."""

    kind = "order"
    ledger: Any = None

    async def receive(self, message: Start) -> Any:
        self.context.finish(await self.ledger.ask(Add(n=message.input)))


async def test_asks_from_two_executions_never_share_an_answer(store: Store) -> None:
    async with Runtime(store) as rt:
        Order.ledger = await rt.spawn(Ledger, "shared", durable=True)
        first = await rt.run(Order, 10, execution_id="order-1")
        second = await rt.run(Order, 25, execution_id="order-2")
    assert (first.output, second.output) == (10, 35)


class Tick(BaseModel):
    pass


class Counter(Actor[Total]):
    kind = "counter"
    messages = (Tick,)

    async def receive(self, message: Tick) -> Any:
        self.state.total += 1
        return self.state.total


class Sender(Actor[BaseModel]):
    """Sends 5 ticks, then pauses: on resume the handler runs again from its start."""

    kind = "sender"

    async def receive(self, message: Start) -> Any:
        counter = await self.context.spawn(Counter, "c", durable=True)
        for _ in range(5):
            await counter.send(Tick())
        decision = interrupt("go on?")
        self.context.finish({"approved": decision.approved, "total": await counter.ask(Tick())})


async def test_sends_are_not_repeated_when_a_handler_runs_again(store: Store) -> None:
    async with Runtime(store) as rt:
        assert (await rt.run(Sender, None, execution_id="s", name="s")).status == "paused"
        done = await rt.resume(Sender, "s", Resume(approved=True))
    assert done.output == {"approved": True, "total": 6}  # 5 sends once, then the ask


class ParallelAsker(Actor[BaseModel]):
    kind = "fan"

    async def receive(self, message: Start) -> Any:
        ledger = await self.context.spawn(Ledger, "l", durable=True)
        results: dict[int, int] = {}

        async def ask(n: int) -> None:
            results[n] = await ledger.ask(Add(n=n))

        async with anyio.create_task_group() as tg:
            for n in (1, 100):
                tg.start_soon(ask, n)
        decision = interrupt("check")
        self.context.finish({"sum": sum(results.values()), "approved": decision.approved})


async def test_parallel_asks_replay_their_own_answers(store: Store) -> None:
    # Trio may run the two asks in another order when the handler runs again;
    # each must still get back the answer to its own message.
    async with Runtime(store) as rt:
        paused = await rt.run(ParallelAsker, None, execution_id="p", name="p")
        first_sum = paused.status
        done = await rt.resume(ParallelAsker, "p", Resume(approved=True))
    assert first_sum == "paused"
    assert done.output is not None
    assert done.output["sum"] in (1 + 101, 100 + 101)  # the answers of the first run


class Worker(Actor[BaseModel]):
    kind = "worker"
    messages = (Tick, Add)

    async def receive(self, message: Any) -> Any:
        if isinstance(message, Tick):
            interrupt("approve the job")
        return "status"


class Dispatcher(Actor[BaseModel]):
    kind = "root"

    async def receive(self, message: Start) -> Any:
        worker = await self.context.spawn(Worker, "w", durable=True)
        await worker.send(Tick())                   # suspends in the worker, nobody waiting
        self.context.finish(await worker.ask(Add(n=1)))


async def test_a_suspension_under_a_send_pauses_the_execution(store: Store) -> None:
    async with Runtime(store) as rt:
        with anyio.fail_after(10):
            paused = await rt.run(Dispatcher, None, execution_id="d", name="d")
    assert paused.status == "paused"
    assert [p.agent_path for p in paused.pending] == ["root:d/worker:w"]


async def test_children_of_an_execution_must_be_durable(store: Store) -> None:
    class Careless(Actor[BaseModel]):
        kind = "root"

        async def receive(self, message: Start) -> Any:
            await self.context.spawn(Counter, "c")

    async with Runtime(store) as rt:
        failed = await rt.run(Careless, None, execution_id="c", name="c")
    assert failed.status == "failed"
    assert failed.error is not None
    assert "durable=True" in failed.error


async def test_interrupt_in_a_standalone_durable_actor_is_a_usage_error(store: Store) -> None:
    class Service(Actor[BaseModel]):
        kind = "service"
        messages = (Tick,)

        async def receive(self, message: Tick) -> Any:
            interrupt("approve")

    async with Runtime(store) as rt:
        ref = await rt.spawn(Service, "s", durable=True, restart="temporary")
        with pytest.raises(ActorCrashed) as info:
            await ref.ask(Tick())
    assert isinstance(info.value.__cause__, UsageError)
    assert await store.count_pending() == 0


async def test_one_runtime_cannot_drive_an_execution_twice_at_once(store: Store) -> None:
    started = anyio.Event()
    release = anyio.Event()

    class Slow(Actor[BaseModel]):
        kind = "slow"
        runs = 0

        async def receive(self, message: Start) -> Any:
            Slow.runs += 1
            started.set()
            await release.wait()
            self.context.finish("done")

    outcomes: list[str] = []

    async def run(rt: Runtime) -> None:
        try:
            outcomes.append((await rt.run(Slow, None, execution_id="once")).status)
        except LeaseHeld:
            outcomes.append("lease held")

    async with Runtime(store) as rt, anyio.create_task_group() as tg:
        tg.start_soon(run, rt)
        await started.wait()
        await run(rt)  # the same id again, while the first drive holds it
        release.set()
    assert sorted(outcomes) == ["completed", "lease held"]
    assert Slow.runs == 1
