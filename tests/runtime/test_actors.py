"""Mailbox actors under anyio task groups: messaging, crashes and OTP supervision."""

from __future__ import annotations

from typing import Any, ClassVar

import anyio
import pytest
from pydantic import BaseModel
from tether.runtime import (
    Actor,
    ActorCrashed,
    ActorStopped,
    Runtime,
    SupervisionEscalated,
    SupervisionStrategy,
)
from tether.stores import ConfigurationError


class Add(BaseModel):
    n: int = 1


class Get(BaseModel):
    pass


class Boom(BaseModel):
    pass


class Count(BaseModel):
    total: int = 0


class Counter(Actor[Count]):
    kind = "counter"

    async def receive(self, message: Any) -> Any:
        if isinstance(message, Add):
            self.state.total += message.n
        elif isinstance(message, Boom):
            raise RuntimeError("boom")
        return self.state.total


class Log:
    """What happened, in order, across every actor of a test."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def __call__(self, event: str) -> None:
        self.events.append(event)

    def only(self, prefix: str) -> list[str]:
        return [e for e in self.events if e.startswith(prefix)]


def recording(log: Log, name: str) -> type[Actor[Count]]:
    class Recorded(Counter):
        async def started(self) -> None:
            log(f"start {name}")

        async def stopping(self) -> None:
            log(f"stop {name}")

    return Recorded


def parent_of(log: Log, strategy: SupervisionStrategy, names: list[str],
              max_restarts: int = 3) -> type[Actor[Any]]:
    class Parent(Actor[Count]):
        kind = "parent"
        supervision = strategy

        async def started(self) -> None:
            self.kids = {}
            for name in names:
                self.kids[name] = await self.context.spawn(recording(log, name), name)

        async def receive(self, message: Any) -> Any:
            return self.kids[message]

    Parent.max_restarts = max_restarts
    return Parent


async def test_ask_and_send() -> None:
    async with Runtime() as rt:
        ref = await rt.spawn(Counter, "c")
        assert ref.path == "counter:c"
        await ref.send(Add(n=2))
        await ref.send(Add(n=3))
        assert await ref.ask(Get()) == 5


async def test_a_crash_fails_the_ask_and_restarts_the_actor() -> None:
    async with Runtime() as rt:
        ref = await rt.spawn(Counter, "c")
        await ref.ask(Add(n=7))
        with pytest.raises(ActorCrashed) as info:
            await ref.ask(Boom())
        assert isinstance(info.value.__cause__, RuntimeError)
        # A permanent, non-durable actor comes back with fresh state; the ref still works.
        assert await ref.ask(Get()) == 0


async def test_names_and_paths_are_checked() -> None:
    async with Runtime() as rt:
        await rt.spawn(Counter, "c")
        with pytest.raises(ConfigurationError, match="already runs"):
            await rt.spawn(Counter, "c")
        with pytest.raises(ConfigurationError, match="must not contain '/'"):
            await rt.spawn(Counter, "a/b")
        with pytest.raises(ConfigurationError, match="no store"):
            await rt.spawn(Counter, "d", durable=True)


async def test_stop_refuses_later_messages() -> None:
    async with Runtime() as rt:
        ref = await rt.spawn(Counter, "c")
        await ref.stop()
        await ref.stop()
        with pytest.raises(ActorStopped):
            await ref.send(Add())


@pytest.mark.parametrize(
    ("strategy", "restarted"),
    [
        (SupervisionStrategy.ONE_FOR_ONE, ["b"]),
        (SupervisionStrategy.ONE_FOR_ALL, ["a", "b", "c"]),
        (SupervisionStrategy.REST_FOR_ONE, ["b", "c"]),
    ],
)
async def test_supervision_strategies(strategy: SupervisionStrategy, restarted: list[str]) -> None:
    log = Log()
    async with Runtime() as rt:
        parent = await rt.spawn(parent_of(log, strategy, ["a", "b", "c"]), "p")
        kids = {name: await parent.ask(name) for name in "abc"}
        for kid in kids.values():
            await kid.ask(Add(n=10))
        log.events.clear()
        with pytest.raises(ActorCrashed):
            await kids["b"].ask(Boom())
        # The crashed child answers only from a new incarnation, and the strategy
        # halts every sibling before relaunching any: after b, ask the others.
        assert await kids["b"].ask(Get()) == 0
        for name in restarted:
            assert await kids[name].ask(Get()) == 0
        starts = [e.split()[1] for e in log.only("start")]
        stops = [e.split()[1] for e in log.only("stop")]
        assert starts == restarted
        # Siblings were stopped last-started first; the crashed child had no clean stop.
        assert stops == [n for n in reversed(restarted) if n != "b"]
        for name in "abc":
            expected = 0 if name in restarted else 10
            assert await kids[name].ask(Get()) == expected


async def test_restart_policies() -> None:
    async with Runtime() as rt:
        temporary = await rt.spawn(Counter, "t", restart="temporary")
        with pytest.raises(ActorCrashed) as info:
            await temporary.ask(Boom())
        assert isinstance(info.value.__cause__, RuntimeError)
        with pytest.raises(ActorStopped):
            await temporary.ask(Get())

        transient = await rt.spawn(Counter, "tr", restart="transient")
        with pytest.raises(ActorCrashed):
            await transient.ask(Boom())
        assert await transient.ask(Get()) == 0  # restarted after a crash


async def test_restart_intensity_escalates_to_the_parent() -> None:
    log = Log()
    async with Runtime() as rt:
        parent = await rt.spawn(parent_of(log, SupervisionStrategy.ONE_FOR_ONE, ["a", "b"], max_restarts=2),
                                "p", restart="temporary")
        kid = await parent.ask("b")
        for _ in range(3):
            with pytest.raises(ActorCrashed):
                await kid.ask(Boom())
        # Third crash within the window: both children stopped, the parent failed
        # (temporary at the top, so it is gone).
        with anyio.fail_after(10):
            while True:
                try:
                    await parent.ask("a")
                except ActorStopped:
                    break
                await anyio.sleep(0.01)
        assert "stop a" in log.events
        with pytest.raises(ActorStopped):
            await kid.ask(Get())


async def test_escalation_at_the_top_ends_the_runtime() -> None:
    async def crash_once_and_wait() -> None:
        async with Runtime(max_restarts=0) as rt:
            ref = await rt.spawn(Counter, "c")
            with pytest.raises(ActorCrashed):
                await ref.ask(Boom())
            await anyio.sleep_forever()  # the escalation cancels this

    with pytest.raises(ExceptionGroup) as info:
        await crash_once_and_wait()
    assert info.group_contains(SupervisionEscalated)


async def test_shutdown_stops_children_before_parents_in_reverse_order() -> None:
    log = Log()

    class Tree(Actor[Count]):
        kind = "tree"
        children: ClassVar[list[str]] = ["x", "y"]

        async def started(self) -> None:
            for name in self.children:
                await self.context.spawn(recording(log, name), name)

        async def stopping(self) -> None:
            log("stop tree")

    async with Runtime() as rt:
        await rt.spawn(recording(log, "first"), "first")
        await rt.spawn(Tree, "t")
        await rt.spawn(recording(log, "last"), "last")
    assert log.only("stop") == ["stop last", "stop tree", "stop y", "stop x", "stop first"]


async def test_a_slow_handler_is_cut_off_at_its_shutdown_timeout() -> None:
    class Slow(BaseModel):
        pass

    entered = anyio.Event()

    class Sleeper(Counter):
        async def receive(self, message: Any) -> Any:
            entered.set()
            await anyio.sleep_forever()

    with anyio.fail_after(10):
        async with Runtime() as rt:
            ref = await rt.spawn(Sleeper, "s", shutdown_timeout=0.05)
            async with anyio.create_task_group() as tg:
                async def asker() -> None:
                    with pytest.raises(ActorStopped):
                        await ref.ask(Slow())

                tg.start_soon(asker)
                await entered.wait()
                await ref.stop()


async def test_a_failing_start_fails_the_spawn_with_its_own_error() -> None:
    class Refuses(Counter):
        async def started(self) -> None:
            raise LookupError("no such account")

    async with Runtime() as rt:
        with pytest.raises(LookupError, match="no such account"):
            await rt.spawn(Refuses, "r")
        # The name is free again.
        await rt.spawn(Counter, "r")
