"""A process that runs a chain or an agent until another process cancels it.

Usage: python _cancel_child.py STORE_URL BACKEND KIND EXECUTION_ID LEASE_SECONDS

KIND: chain | agent. Both charge once (an @idempotent side effect), then wait in
an async step that only a cancel ends: it prints ``in wait`` there, and notes
``wait cancelled`` when it is cut. Every side effect and note goes to the file
``TETHER_TEST_RUNS``, outside the store. The result is printed as JSON.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio
from _child import say
from tether.actors import Agent, Chain, FunctionTool, ScriptedLLM, ToolCall
from tether.runtime import idempotent
from tether.stores import open_store

RUNS_FILE = os.environ["TETHER_TEST_RUNS"]


def note(line: str) -> None:
    with open(RUNS_FILE, "a") as runs:
        runs.write(line + "\n")
        runs.flush()
        os.fsync(runs.fileno())


@idempotent
async def charge_card(amount: int) -> str:
    note("charge")
    return f"charged {amount}"


async def wait_for_the_customer() -> str:
    note("waiting")
    say("in wait")
    try:
        await anyio.sleep_forever()
    finally:
        note("wait cancelled")
    return "never"


async def charge(state: dict[str, Any]) -> dict[str, Any]:
    return {"receipt": await charge_card(70)}


async def wait(state: dict[str, Any]) -> dict[str, Any]:
    return {"answer": await wait_for_the_customer()}


async def charge_tool(amount: int) -> str:
    return await charge_card(amount)


def build(kind: str, store: Any, lease_seconds: float) -> Any:
    if kind == "chain":
        chain = Chain("refund", store=store, lease_seconds=lease_seconds)
        chain.add_node(charge)
        chain.add_node(wait)
        chain.add_edge("charge", "wait")
        return chain
    llm = ScriptedLLM([ToolCall("charge_tool", {"amount": 70}), ToolCall("wait_for_the_customer", {}), "Done."])
    return Agent("refunder", llm=llm, store=store, lease_seconds=lease_seconds,
                 tools=[FunctionTool(charge_tool), FunctionTool(wait_for_the_customer)])


async def main(url: str, kind: str, execution_id: str, lease_seconds: float) -> None:
    async with open_store(url) as store:
        result = await build(kind, store, lease_seconds).run("Refund order 7", execution_id=execution_id)
    print(json.dumps(result.model_dump(mode="json")), flush=True)


if __name__ == "__main__":
    url, backend, kind, execution_id, lease = sys.argv[1:6]
    anyio.run(main, url, kind, execution_id, float(lease), backend=backend)
