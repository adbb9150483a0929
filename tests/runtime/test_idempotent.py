"""@idempotent: once across a crash, twice for two calls, cached from a thread, typed on the way back."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from pydantic import BaseModel
from tether.runtime import Actor, Runtime, idempotency_key, idempotent
from tether.stores import SerializationError, Store, UsageError

SIDE_EFFECTS: list[str] = []
KEYS: list[str] = []
CRASHED: set[str] = set()


class Receipt(BaseModel):
    charge_id: str
    cents: int


@idempotent
async def charge(customer: str, cents: int) -> Receipt:
    SIDE_EFFECTS.append(f"charge {customer} {cents}")
    KEYS.append(idempotency_key())
    return Receipt(charge_id=f"ch_{len(SIDE_EFFECTS)}", cents=cents)


@idempotent
def email(to: str) -> str:  # synchronous: called from a worker thread
    SIDE_EFFECTS.append(f"email {to}")
    return f"sent to {to}"


@idempotent
async def unrecordable() -> Any:
    return object()


class Pay(BaseModel):
    customer: str
    cents: int
    times: int = 1
    crash_after: str = ""  # crash once, after the side effects, the first time


class Orders(BaseModel):
    receipts: list[str] = []


class Shop(Actor[Orders]):
    kind = "shop"
    messages = (Pay,)

    async def receive(self, message: Pay) -> Any:
        receipts = [await charge(message.customer, message.cents) for _ in range(message.times)]
        note = await anyio.to_thread.run_sync(email, message.customer)
        if message.crash_after and message.crash_after not in CRASHED:
            CRASHED.add(message.crash_after)
            raise RuntimeError("crash after the side effects, before the boundary")
        self.state.receipts += [r.charge_id for r in receipts]
        # Typed on the way back, whether it ran or came from the record.
        assert all(isinstance(r, Receipt) for r in receipts)
        return [r.model_dump() for r in receipts], note


@pytest.fixture(autouse=True)
def _clean() -> None:
    SIDE_EFFECTS.clear()
    KEYS.clear()
    CRASHED.clear()


async def test_once_across_a_crash(store: Store) -> None:
    async with Runtime(store) as rt:
        shop = await rt.spawn(Shop, "a", durable=True)
        receipts, note = await shop.ask(Pay(customer="ann", cents=500, crash_after="first"))
    # The message was handled twice (crash, then again); each side effect ran once.
    assert SIDE_EFFECTS == ["charge ann 500", "email ann"]
    assert receipts == [{"charge_id": "ch_1", "cents": 500}]
    assert note == "sent to ann"


async def test_two_identical_calls_are_two_calls_and_both_are_replayed(store: Store) -> None:
    async with Runtime(store) as rt:
        shop = await rt.spawn(Shop, "b", durable=True)
        receipts, _ = await shop.ask(Pay(customer="bo", cents=100, times=2, crash_after="second"))
    assert SIDE_EFFECTS == ["charge bo 100", "charge bo 100", "email bo"]
    assert [r["charge_id"] for r in receipts] == ["ch_1", "ch_2"]
    assert len(set(KEYS)) == 2  # each call has a key of its own, stable across the replay


async def test_another_message_is_another_call(store: Store) -> None:
    async with Runtime(store) as rt:
        shop = await rt.spawn(Shop, "c", durable=True)
        await shop.ask(Pay(customer="cy", cents=1))
        await shop.ask(Pay(customer="cy", cents=1))
    assert SIDE_EFFECTS.count("charge cy 1") == 2


async def test_an_unrecordable_result_fails_at_the_first_call(store: Store) -> None:
    class Bad(BaseModel):
        pass

    class Recorder(Actor[Orders]):
        kind = "recorder"
        messages = (Bad,)

        async def receive(self, message: Any) -> Any:
            with pytest.raises(SerializationError, match="cannot be recorded"):
                await unrecordable()
            return "checked"

    async with Runtime(store) as rt:
        ref = await rt.spawn(Recorder, "r", durable=True)
        assert await ref.ask(Bad()) == "checked"


@idempotent
async def double(x: int) -> int:
    SIDE_EFFECTS.append(f"double {x}")
    return 2 * x


async def test_outside_a_durable_actor_it_just_runs() -> None:
    assert await double(3) == 6
    assert await double(3) == 6
    assert email("dee") == "sent to dee"
    assert SIDE_EFFECTS == ["double 3", "double 3", "email dee"]
    with pytest.raises(UsageError, match="inside an @idempotent"):
        idempotency_key()


async def test_a_sync_call_on_the_loop_thread_is_refused_with_advice(store: Store) -> None:
    class Direct(BaseModel):
        pass

    class Careless(Actor[Orders]):
        kind = "careless"
        messages = (Direct,)

        async def receive(self, message: Any) -> Any:
            with pytest.raises(UsageError, match=r"to_thread\.run_sync"):
                email("eve")
            return "refused"

    async with Runtime(store) as rt:
        ref = await rt.spawn(Careless, "x", durable=True)
        assert await ref.ask(Direct()) == "refused"
    assert SIDE_EFFECTS == []
