"""A process that runs one scenario's swarm or supervisor, for the SIGKILL tests (see _crash.py).

Usage: python _team_child.py STORE_URL BACKEND SCENARIO MODE EXECUTION_ID [SCHEMA]

MODE: run | recover | resume (approves the pause). Each agent's scripted LLM
writes ``llm-<agent>-<turn>`` to the runs file when asked; tools write their names.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
from _child import run_child, say
from tether.actors import Agent, AssistantMessage, Message, ScriptedLLM, Supervisor, Swarm, ToolCall, Worker
from tether.runtime import interrupt
from tether.stores import Store

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
        say(f"in {name}")
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
            store=store, lease_seconds=60.0)
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
    return Supervisor(scenario, llm=CountingLLM("planner", script), workers=workers, store=store, lease_seconds=60.0)


if __name__ == "__main__":
    run_child(lambda scenario, store: (build(scenario, store), dict), "Investigate and report.")
