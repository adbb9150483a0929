"""Store work never runs on the event loop's thread, however many actors write at once."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel
from tether.runtime import Actor, ActorRef, Runtime
from tether.stores import SQLiteStore


class Ping(BaseModel):
    hops: int


class Hops(BaseModel):
    seen: int = 0


class Relay(Actor[Hops]):
    kind = "relay"
    messages = (Ping,)
    peers: list[ActorRef] = []  # noqa: RUF012  (filled by the test)

    async def receive(self, message: Any) -> Any:
        self.state.seen += 1
        if message.hops > 0:
            await self.peers[(self.state.seen * 7) % len(self.peers)].send(Ping(hops=message.hops - 1))
        return self.state.seen


async def test_fifty_durable_actors_keep_sqlite_off_the_loop(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "relay.db", synchronous="NORMAL")
    loop_thread = threading.get_ident()
    statement_threads: set[int] = set()
    async with store, Runtime(store) as rt:
        # Watch every statement the store's connection runs, and on which thread.
        store._conn._conn.set_trace_callback(  # type: ignore[union-attr]
            lambda sql: statement_threads.add(threading.get_ident())
        )
        Relay.peers = [await rt.spawn(Relay, str(i), durable=True) for i in range(50)]
        async with anyio.create_task_group() as tg:
            for i, ref in enumerate(Relay.peers):
                tg.start_soon(ref.send, Ping(hops=3 + i % 3))
        for ref in Relay.peers:  # each mailbox drains before its reply
            await ref.ask(Ping(hops=0))
    assert statement_threads, "no statement was traced"
    assert loop_thread not in statement_threads
