"""Runners for the operator tests, loaded with --app tests.operator._flows:runners."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel
from tether.actors import Chain
from tether.runtime import interrupt, wait_for


def validate(state: dict[str, Any]) -> dict[str, Any]:
    return {"valid": True}


def approve(state: dict[str, Any]) -> dict[str, Any]:
    decision = interrupt("manager_approval", {"amount": state["amount"], "note": state.get("note", "")})
    return {"approved": decision.approved, "approver": decision.metadata.get("approver")}


def charge(state: dict[str, Any]) -> dict[str, Any]:
    return {"charged": state["amount"] if state["approved"] else 0}


refund = Chain("refund", [validate, approve, charge], lease_seconds=1.0)
runners = [refund]
changed = [Chain("refund", [validate, charge], lease_seconds=1.0)]  # the node the run waits in is gone


def shaky(state: dict[str, Any]) -> dict[str, Any]:
    """Fails while the file the input names exists: the operator fixes it, then retries."""
    if Path(state["broken_while"]).exists():
        raise RuntimeError("the ledger is down")
    return {"booked": True}


flaky = Chain("flaky", [validate, shaky], lease_seconds=1.0)
retrying = [refund, flaky]


class Approval(BaseModel):
    approved: bool
    by: str


def note_effect(state: dict[str, Any], what: str) -> None:
    """One line per run of a node, outside the store, in the file the input names."""
    with open(state["effects"], "a") as effects:
        effects.write(what + "\n")


async def await_approval(state: dict[str, Any]) -> dict[str, Any]:
    approval = await wait_for(Approval)
    assert approval is not None
    return {"approved": approval.approved, "approver": approval.by}


def book(state: dict[str, Any]) -> dict[str, Any]:
    note_effect(state, f"booked by {state['approver']}")
    return {"booked": True}


desk = Chain("desk", [validate, await_approval, book], lease_seconds=1.0)
messaging = [desk]
