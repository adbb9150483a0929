"""Runners for the operator tests, loaded with --app tests.operator._flows:runners."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tether.actors import Chain
from tether.runtime import interrupt


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
