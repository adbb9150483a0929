"""A process that runs one scenario's swarm or supervisor, for the SIGKILL tests (see _crash.py).

Usage: python _team_child.py STORE_URL BACKEND SCENARIO MODE EXECUTION_ID [SCHEMA]

MODE: run | recover | resume (approves the pause). Each agent's scripted LLM
writes ``llm-<agent>-<turn>`` to the runs file when asked; tools write their names.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
from tether.actors import Agent, AssistantMessage, Message, ScriptedLLM, Supervisor, Swarm, ToolCall, Worker
from tether.runtime import AlreadyResumed, Resume, interrupt
from tether.stores import LeaseHeld, PostgresStore, Store, open_store

RUNS_FILE = os.environ["TETHER_TEST_RUNS"]
BLOCK = os.environ.get("TETHER_TEST_BLOCK", "")


def ran(name: str) -> None:
    """Record a run outside the store; block there if this visit is the one to kill in."""
    with open(RUNS_FILE, "a") as runs:
        runs.write(name + "\n")
        runs.flush()
        os.fsync(runs.fileno())
    with open(RUNS_FILE) as runs:
        visits = sum(1 for line in runs if line.strip() == name)
    if BLOCK == f"{name}:{visits}":
        print(f"in {name}", flush=True)
        anyio.from_thread.run(anyio.sleep_forever)  # killed here


class CountingLLM(ScriptedLLM):
    def __init__(self, agent: str, script: list[Any]) -> None:
        super().__init__(script)
        self.agent = agent

    async def complete(self, messages: Sequence[Message], tools: Any) -> AssistantMessage:
        turn = sum(1 for m in messages if isinstance(m, AssistantMessage)) + 1
        await anyio.to_thread.run_sync(ran, f"llm-{self.agent}-{turn}")
        return await super().complete(messages, tools)


def approve_publish(title: str) -> str:
    ran("approve_publish")
    return "published" if interrupt("publish_approval", {"title": title}).approved else "held"


def draft(topic: str) -> str:
    ran("draft")  # killed here in the crash scenarios
    return f"draft on {topic}"


def search(query: str) -> str:
    ran("search")
    return f"3 results for {query}"


def approve_refund(amount: int) -> str:
    ran("approve_refund")
    return "approved" if interrupt("manager_approval", {"amount": amount}).approved else "refused"


def refund_and_freeze(amount: int) -> str:
    ran("refund_and_freeze")
    refund = "approved" if interrupt("manager_approval", {"amount": amount}).approved else "refused"
    freeze = "frozen" if interrupt("security_approval", {"account": "A1"}).approved else "open"
    return f"{refund}, {freeze}"


def agent(name: str, script: list[Any], tools: list[Any]) -> Agent:
    return Agent(name, llm=CountingLLM(name, script), tools=tools)


def build(scenario: str, store: Store) -> Swarm | Supervisor:
    if scenario in ("swarm", "swarm_crash"):
        middle = (ToolCall("approve_publish", {"title": "T"}) if scenario == "swarm"
                  else ToolCall("draft", {"topic": "T"}))
        return Swarm(scenario, agents=[
            agent("researcher", [ToolCall("search", {"query": "q"}), ToolCall("handoff_to_analyst", {"message": "m"})],
                  [search]),
            agent("analyst", [middle, ToolCall("handoff_to_reporter", {"message": "ok"})], [approve_publish, draft]),
            agent("reporter", ["Report done."], []),
        ], entrypoint="researcher", handoffs={"researcher": ["analyst"], "analyst": ["reporter"]},
            store=store, lease_seconds=1.0)
    workers = [Worker(agent("researcher", [ToolCall("search", {"query": "q"}), "found"], [search]), "researcher")]
    if scenario == "twice":
        workers.append(Worker(agent("auditor", [ToolCall("refund_and_freeze", {"amount": 9}), "audited"],
                                    [refund_and_freeze]), "auditor"))
        script: list[Any] = [ToolCall("delegate_to_auditor", {"task": "audit"}), "Planned."]
    else:
        tool = ToolCall("draft", {"topic": "audit"}) if scenario == "supervisor_crash" else \
            ToolCall("approve_refund", {"amount": 50_000})
        workers.append(Worker(agent("auditor", [tool, "audited"], [draft, approve_refund]), "auditor"))
        script = [[ToolCall("delegate_to_researcher", {"task": "research"}),
                   ToolCall("delegate_to_auditor", {"task": "audit"})], "Planned."]
    return Supervisor(scenario, llm=CountingLLM("planner", script), workers=workers, store=store, lease_seconds=1.0)


def show(result: Any) -> None:
    print(json.dumps(result.model_dump(mode="json")), flush=True)


async def main(url: str, scenario: str, mode: str, execution_id: str, schema: str | None) -> None:
    store: Store = PostgresStore(url, schema=schema) if schema else open_store(url)
    async with store:
        team = build(scenario, store)
        if mode == "run":
            show(await team.run("Investigate and report.", execution_id=execution_id))
        elif mode == "resume":
            try:
                show(await team.resume(execution_id, Resume(approved=True)))
            except AlreadyResumed:
                print(json.dumps({"status": "already_resumed"}), flush=True)
        else:
            while True:
                try:
                    show(await team.resume(execution_id))
                    return
                except LeaseHeld as held:
                    await anyio.sleep(max(0.0, (held.expires_at - datetime.now(UTC)).total_seconds()) + 0.05)


if __name__ == "__main__":
    url, backend, scenario, mode, execution_id = sys.argv[1:6]
    anyio.run(main, url, scenario, mode, execution_id, sys.argv[6] if len(sys.argv) > 6 else None,
              backend=backend)
