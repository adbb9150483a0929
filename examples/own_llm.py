"""Your own LLM client in a durable agent: an adapter is one async method, `complete`.

    python examples/own_llm.py                  # no network: a toy client, a temporary SQLite store
    python examples/own_llm.py --backend trio

`ToyClient` stands in for any client tether does not ship (a vendor SDK, a
local model, a gateway of your company's): it has its own request and reply
shapes. `ToyLLM` is the whole adapter: it puts tether's conversation into the
client's shape and the client's reply into an `AssistantMessage`. An `Agent`
then journals each turn and tool call as usual, so the run survives a crash
and resumes without asking the client again for a turn it already answered.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
from tether.actors import (
    LLM,
    Agent,
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolSpec,
    UserMessage,
)
from tether.stores import SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Sequence


class ToyClient:
    """A client with shapes of its own: turns ``{"from", "text"}``, and a reply that says or calls."""

    def __init__(self) -> None:
        self.requests = 0

    async def chat(self, *, system: str, turns: list[dict[str, Any]],
                   functions: list[dict[str, Any]]) -> dict[str, Any]:
        self.requests += 1
        await anyio.lowlevel.checkpoint()  # a real client would await the network here
        last = turns[-1]
        if last["from"] == "user" and any(f["name"] == "lookup_order" for f in functions):
            order = int(re.search(r"\d+", last["text"]).group())  # type: ignore[union-attr]
            return {"call": {"fn": "lookup_order", "args": {"order": order}, "ref": f"ref-{self.requests}"}}
        if last["from"] == "function":
            return {"say": f"Order status: {last['result']}"}
        return {"say": "I can only look orders up."}


class ToyLLM:
    """The adapter: any object with this method is an `LLM` an agent can use."""

    def __init__(self, client: ToyClient) -> None:
        self.client = client

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> AssistantMessage:
        system = "\n\n".join(m.content for m in messages if isinstance(m, SystemMessage))
        turns: list[dict[str, Any]] = []
        for m in messages:
            if isinstance(m, UserMessage):
                turns.append({"from": "user", "text": m.content})
            elif isinstance(m, AssistantMessage):
                turns.append({"from": "bot", "text": m.content or "",
                              "calls": [{"fn": c.name, "args": c.arguments, "ref": c.id} for c in m.tool_calls]})
            elif isinstance(m, ToolMessage):
                turns.append({"from": "function", "ref": m.tool_call_id, "result": m.content})
        functions = [{"name": t.name, "doc": t.description, "schema": t.parameters} for t in tools]
        reply = await self.client.chat(system=system, turns=turns, functions=functions)
        if "call" in reply:
            call = reply["call"]
            return AssistantMessage(tool_calls=[ToolCall(call["fn"], call["args"], id=call["ref"])])
        return AssistantMessage(content=reply["say"])


def lookup_order(order: int) -> str:
    """Look an order up by its number."""
    return f"order {order}: $120, shipped on Monday"


async def main(backend: str) -> int:
    llm = ToyLLM(ToyClient())
    assert isinstance(llm, LLM)  # the protocol is checked structurally: no base class to inherit
    with tempfile.TemporaryDirectory() as folder:
        async with SQLiteStore(Path(folder) / "tether.db") as store:
            agent = Agent(name="orders", system_prompt="You look orders up.", llm=llm, tools=[lookup_order],
                          store=store)
            result = await agent.run("Where is order 7?", execution_id="order-7")
            print(f"{result.status} on {backend}: {result.output}")
            again = await agent.run("Where is order 7?", execution_id="order-7")  # the stored result
            assert again.output == result.output
            journal = await store.read_journal("order-7")
            print("journaled:", ", ".join(e.label for e in journal if e.label))
    print(f"the client was asked {llm.client.requests} times")  # twice: the second run asked nobody
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    arguments = parser.parse_args()
    sys.exit(anyio.run(main, arguments.backend, backend=arguments.backend))
