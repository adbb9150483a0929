"""A process that streams deposits to a durable account actor, or reports its state.

Usage: python _ledger_child.py STORE_URL BACKEND (stream START | report) [SCHEMA]

``stream`` prints "acked N" once ``send`` of deposit N returned; the test kills
it with SIGKILL at some point. ``report`` restores the actor (waiting for the
dead process's lease to expire) and prints its state as JSON.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
from pydantic import BaseModel
from tether.runtime import Actor, ActorRef, Runtime
from tether.stores import PostgresStore, Store, open_store


class Deposit(BaseModel):
    amount: int


class Balance(BaseModel):
    pass


class Ledger(BaseModel):
    balance: int = 0
    deposits: list[int] = []


class LedgerActor(Actor[Ledger]):
    kind = "ledger"
    messages = (Deposit, Balance)

    async def receive(self, message: Any) -> Any:
        if isinstance(message, Deposit):
            self.state.balance += message.amount
            self.state.deposits.append(message.amount)
        return self.state.model_dump()


async def spawn_when_free(rt: Runtime) -> ActorRef:
    # A killed process's lease is taken over at once: its death is seen on this machine.
    return await rt.spawn(LedgerActor, "main", durable=True)


async def main(url: str, mode: str, start: int, schema: str | None) -> None:
    store: Store = PostgresStore(url, schema=schema) if schema else open_store(url)
    async with store, Runtime(store, lease_seconds=60.0) as rt:
        ledger = await spawn_when_free(rt)
        if mode == "report":
            print(json.dumps(await ledger.ask(Balance())), flush=True)
            return
        for amount in range(start, start + 100_000):
            await ledger.send(Deposit(amount=amount))
            print(f"acked {amount}", flush=True)


if __name__ == "__main__":
    url, backend, mode = sys.argv[1:4]
    start = int(sys.argv[4]) if mode == "stream" else 0
    schema = sys.argv[5] if mode == "stream" and len(sys.argv) > 5 else (
        sys.argv[4] if mode == "report" and len(sys.argv) > 4 else None)
    anyio.run(main, url, mode, start, schema, backend=backend)
