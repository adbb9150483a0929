"""The soak's runners, loaded by `tether worker --app tests.soak._app:runners`.

Six kinds of execution, each with exactly one charge (an `@idempotent` effect)
when it completes:

- ``order``: a Chain with an approval pause, decided from another process;
- ``timer``: a Chain that sleeps durably, then charges;
- ``deadline``: a Chain whose approval nobody gives: a worker decides it with
  the default when its deadline passes;
- ``agent``: an Agent whose ``approve`` tool pauses, then charges;
- ``swarm``: a Swarm: triage looks the order up and hands off to billing;
- ``team``: a Supervisor that delegates the charge and a lookup in parallel.

The LLMs are scripted (no network): each reply is chosen by which tool results
the conversation already holds, so a run resumed in any process gets the same
next turn. A charge writes a row keyed by `idempotency_key()` to the SQLite file
named by TETHER_SOAK_EFFECTS (``INSERT OR IGNORE``, as a payment provider
deduplicates by key) and counts every attempt separately, so the test can tell
"ran once per key" from "attempted once".
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from tether.actors import Agent, Chain, ScriptedLLM, Supervisor, Swarm, ToolCall, ToolMessage, Worker
from tether.runtime import Resume, idempotency_key, idempotent, interrupt, sleep

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from tether.actors import AssistantMessage, Message, ToolSpec

EFFECTS = os.environ.get("TETHER_SOAK_EFFECTS", "")
KINDS = ("order", "timer", "deadline", "agent", "swarm", "team")


def prepare(path: str) -> None:
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, execution TEXT, pid INTEGER)")
        db.execute("CREATE TABLE IF NOT EXISTS attempts (key TEXT, execution TEXT, pid INTEGER)")


@idempotent
def charge_card(order: str) -> int:
    with sqlite3.connect(EFFECTS, timeout=60) as db:
        db.execute("INSERT INTO attempts (key, execution, pid) VALUES (?, ?, ?)", (idempotency_key(), order, os.getpid()))
        db.execute("INSERT OR IGNORE INTO effects (key, execution, pid) VALUES (?, ?, ?)",
                   (idempotency_key(), order, os.getpid()))
    return os.getpid()


# Chain nodes.

def work(state: dict[str, Any]) -> dict[str, Any]:
    time.sleep(state["work"])  # the node's own work: a worker holds the execution meanwhile, so a kill can land in it
    return {"worked_by": os.getpid()}


def approve(state: dict[str, Any]) -> dict[str, Any]:
    return {"approved": interrupt("manager_approval", {"order": state["order"]}).approved}


def approve_in_time(state: dict[str, Any]) -> dict[str, Any]:
    decision = interrupt("manager_approval", {"order": state["order"]},
                         timeout=timedelta(seconds=state["timeout"]), default=Resume(approved=False))
    return {"approved": decision.approved}


def charge(state: dict[str, Any]) -> dict[str, Any]:
    return {"charged_by": charge_card(state["order"])}


async def nap(state: dict[str, Any]) -> dict[str, Any]:
    await sleep(state["nap"])
    return {"rested": True}


# Agent tools.

def approve_tool(order: str) -> str:
    """Ask a manager to approve the order."""
    return "approved" if interrupt("manager_approval", {"order": order}).approved else "refused"


def charge_tool(order: str) -> str:
    """Charge the order's card."""
    return f"charged by {charge_card(order)}"


def lookup(order: str) -> str:
    """Look the order up."""
    return f"order {order}: 1 item"


approve_tool.__name__ = "approve"
charge_tool.__name__ = "charge"

ORDER = re.compile(r"order=(\S+)")


def _order(messages: Sequence[Message]) -> str:
    for message in messages:
        content = getattr(message, "content", None)
        if isinstance(content, str) and (found := ORDER.search(content)):
            return found.group(1)
    raise AssertionError(f"no order=... in the conversation: {messages!r}")


def _done(messages: Sequence[Message], tool: str) -> bool:
    return any(isinstance(m, ToolMessage) and m.name == tool for m in messages)


class SoakLLM(ScriptedLLM):
    """A `ScriptedLLM` that keeps no requests.

    `ScriptedLLM.requests` keeps every call for tests to inspect; in a worker that
    lives an hour it would grow with every turn and pass for a leak of tether's.
    """

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> AssistantMessage:
        try:
            return await super().complete(messages, tools)
        finally:
            self.requests.clear()


def steps(*calls: str, final: str, arguments: Callable[[str, str], dict[str, Any]] | None = None) -> SoakLLM:
    """An LLM that calls each tool of ``calls`` once, in order, then answers ``final``."""

    def turn(messages: list[Message]) -> Any:
        order = _order(messages)
        for call in calls:
            if not _done(messages, call):
                return ToolCall(call, arguments(call, order) if arguments else {"order": order})
        return final

    return SoakLLM(turn)


def _triage(call: str, order: str) -> dict[str, Any]:
    return {"message": f"bill order={order}"} if call.startswith("handoff") else {"order": order}


def _delegate(messages: list[Message]) -> Any:
    if _done(messages, "delegate_to_billing"):
        return "all ok"
    order = _order(messages)
    return [ToolCall("delegate_to_billing", {"task": f"charge order={order}"}),
            ToolCall("delegate_to_clerk", {"task": f"look up order={order}"})]


LEASE = 2.0
order = Chain("order", [work, approve, charge], lease_seconds=LEASE)
timer = Chain("timer", [work, nap, charge], lease_seconds=LEASE)
deadline = Chain("deadline", [approve_in_time, charge], lease_seconds=LEASE)
agent = Agent("agent", llm=steps("approve", "charge", final="done"), tools=[approve_tool, charge_tool],
              lease_seconds=LEASE)
swarm = Swarm("swarm", agents=[
    Agent("triage", llm=steps("lookup", "handoff_to_billing", final="handed off", arguments=_triage), tools=[lookup]),
    Agent("billing", llm=steps("charge", final="billed"), tools=[charge_tool]),
], entrypoint="triage", lease_seconds=LEASE)
team = Supervisor("team", llm=SoakLLM(_delegate), workers=[
    Worker(Agent("billing", llm=steps("charge", final="billing ok"), tools=[charge_tool]), "billing"),
    Worker(Agent("clerk", llm=steps("lookup", final="clerk ok"), tools=[lookup]), "clerk"),
], lease_seconds=LEASE)
runners = [order, timer, deadline, agent, swarm, team]
BY_KIND = dict(zip(KINDS, runners, strict=True))
