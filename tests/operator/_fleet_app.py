"""Runners for the fleet tests, loaded by `tether worker --app tests.operator._fleet_app:runners`.

Side effects go to the SQLite file named by TETHER_FLEET_EFFECTS, keyed by
`idempotency_key()`, so the test can count them across every process.
"""

from __future__ import annotations

import os
import sqlite3
import time
from datetime import timedelta
from typing import Any

from tether.actors import Chain
from tether.runtime import Resume, idempotency_key, idempotent, interrupt, sleep

EFFECTS = os.environ.get("TETHER_FLEET_EFFECTS", "")


def prepare(path: str) -> None:
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, execution TEXT, pid INTEGER)")


def work(state: dict[str, Any]) -> dict[str, Any]:
    time.sleep(state.get("work", 0.0))  # the node's own work: a worker holds the execution meanwhile
    return {"worked_by": os.getpid()}


def approve(state: dict[str, Any]) -> dict[str, Any]:
    return {"approved": interrupt("manager_approval", {"order": state["order"]}).approved}


def approve_in_time(state: dict[str, Any]) -> dict[str, Any]:
    decision = interrupt("manager_approval", {"order": state["order"]}, timeout=timedelta(seconds=state["timeout"]),
                         default=Resume(approved=False))
    return {"approved": decision.approved}


@idempotent
def charge_card(order: str) -> int:
    with sqlite3.connect(EFFECTS, timeout=30) as db:
        db.execute("INSERT OR IGNORE INTO effects (key, execution, pid) VALUES (?, ?, ?)",
                   (idempotency_key(), order, os.getpid()))
    return os.getpid()


def charge(state: dict[str, Any]) -> dict[str, Any]:
    return {"charged_by": charge_card(state["order"])}


async def nap(state: dict[str, Any]) -> dict[str, Any]:
    await sleep(state["nap"])
    return {"rested": True}


LEASE = 1.0
approvals = Chain("approvals", [work, approve, charge], lease_seconds=LEASE)
batch = Chain("batch", [work, charge], lease_seconds=LEASE)
timers = Chain("timers", [nap, charge], lease_seconds=LEASE)
deadlines = Chain("deadlines", [approve_in_time, charge], lease_seconds=LEASE)
runners = [approvals, batch, timers, deadlines]
