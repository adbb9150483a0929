"""Durable actors: every boundary journaled, state restored, each message applied once."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from pydantic import BaseModel
from tether.runtime import Actor, ActorCrashed, Runtime, SupervisionEscalated
from tether.stores import ConfigurationError, LeaseHeld, Store


class Deposit(BaseModel):
    amount: int
    crash_first_time: bool = False


class Balance(BaseModel):
    pass


class Hold(BaseModel):
    """Handled only once the test lets it go."""


class Account(BaseModel):
    balance: int = 0
    deposits: list[int] = []


CRASHED: set[int] = set()
RELEASE = {"event": None}


class AccountActor(Actor[Account]):
    kind = "account"
    messages = (Deposit, Balance, Hold)

    async def receive(self, message: Any) -> Any:
        if isinstance(message, Deposit):
            self.state.balance += message.amount
            self.state.deposits.append(message.amount)
            if message.crash_first_time and message.amount not in CRASHED:
                CRASHED.add(message.amount)
                raise RuntimeError("crash after changing the state, before the boundary")
        elif isinstance(message, Hold):
            event = RELEASE["event"]
            assert event is not None
            await event.wait()
        return self.state.model_dump()


async def test_a_crash_rolls_back_and_the_message_is_handled_again(store: Store) -> None:
    async with Runtime(store) as rt:
        account = await rt.spawn(AccountActor, "1", durable=True)
        await account.ask(Deposit(amount=10))
        # The handler changed the state, then crashed: the change is not journaled,
        # the restarted actor restores from the journal and handles the message again.
        state = await account.ask(Deposit(amount=5, crash_first_time=True))
        assert state == {"balance": 15, "deposits": [10, 5]}
        assert await account.ask(Balance()) == {"balance": 15, "deposits": [10, 5]}


async def test_state_and_unhandled_messages_survive_the_runtime(store: Store) -> None:
    RELEASE["event"] = anyio.Event()
    async with Runtime(store) as rt:
        account = await rt.spawn(AccountActor, "2", durable=True, shutdown_timeout=0.05)
        await account.ask(Deposit(amount=1))
        await account.send(Hold())               # the handler blocks on this one
        await account.send(Deposit(amount=2))    # queued behind it
        await account.send(Deposit(amount=3))
        await anyio.wait_all_tasks_blocked()
    # The runtime stopped with three messages accepted (journaled) but not handled.
    RELEASE["event"] = anyio.Event()
    RELEASE["event"].set()
    async with Runtime(store) as rt:
        account = await rt.spawn(AccountActor, "2", durable=True)
        assert await account.ask(Balance()) == {"balance": 6, "deposits": [1, 2, 3]}
    entries = await store.read_journal("account:2")
    assert [e.label for e in entries].count("inbox") == 5
    assert sum(e.label.startswith("msg:") for e in entries) == 5


async def test_one_process_runs_a_durable_actor_at_a_time(store: Store) -> None:
    async with Runtime(store) as first, Runtime(store) as second:
        await first.spawn(AccountActor, "3", durable=True)
        with pytest.raises(LeaseHeld):
            await second.spawn(AccountActor, "3", durable=True)


async def test_bytes_per_boundary_do_not_grow_with_history(store: Store) -> None:
    async with Runtime(store, snapshot_every=10) as rt:
        account = await rt.spawn(AccountActor, "4", durable=True)
        for _ in range(100):
            await account.ask(Deposit(amount=7))
    entries = await store.read_journal("account:4")
    handled = [e for e in entries if e.label.startswith("msg:")]
    sizes = [len(str(e.payload)) for e in handled]
    # The 100th boundary costs what the 1st did, but for the digits of its sequence numbers.
    assert len(handled) == 100
    assert max(sizes) - min(sizes) <= 4
    snapshots = [e.payload for e in entries if e.kind == "snapshot"]
    assert len(snapshots) == 10
    assert snapshots[-1] == {"balance": 700}  # the deposits list is never copied
    async with Runtime(store) as rt:
        account = await rt.spawn(AccountActor, "4", durable=True)
        state = await account.ask(Balance())
    assert state["balance"] == 700 and state["deposits"] == [7] * 100


async def test_undeclared_messages_are_refused_before_the_journal(store: Store) -> None:
    class Stray(BaseModel):
        pass

    async with Runtime(store) as rt:
        account = await rt.spawn(AccountActor, "5", durable=True)
        with pytest.raises(ConfigurationError, match="messages"):
            await account.send(Stray())
        with pytest.raises(ConfigurationError):
            await account.send({"not": "a model"})
        assert await account.ask(Balance()) == {"balance": 0, "deposits": []}
    assert [e.label for e in await store.read_journal("account:5")] == ["inbox", "msg:1"]


async def test_a_poison_message_escalates_and_the_asker_learns_why(store: Store) -> None:
    class Poison(BaseModel):
        pass

    class Fragile(AccountActor):
        messages = (Poison,)

        async def receive(self, message: Any) -> Any:
            raise RuntimeError("always")

    async def run() -> None:
        async with Runtime(store, max_restarts=2) as rt:
            ref = await rt.spawn(Fragile, "6", durable=True)
            # Redelivered after each restart (it is journaled), until the intensity is exceeded.
            with pytest.raises(ActorCrashed) as info:
                await ref.ask(Poison())
            assert isinstance(info.value.__cause__, RuntimeError)
            await anyio.sleep_forever()  # the escalation ends the runtime

    with pytest.raises(ExceptionGroup) as group, anyio.fail_after(20):
        await run()
    assert group.group_contains(SupervisionEscalated)
    handled = [e for e in await store.read_journal("account:6") if e.label.startswith("msg:")]
    assert handled == []
