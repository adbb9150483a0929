"""Why a claim consumed nothing: one answer for every store.

Each store gathers the facts its own way (a query, its memory) and asks
`failed_claim` which error they make, so that a second Approve click, a stale
link or a cancelled run is told the same on SQLite, Postgres and in memory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._errors import (
    AlreadyResumed,
    ExecutionFinished,
    ExecutionNotFound,
    LeaseHeld,
    NoPendingInterrupt,
    StoreError,
)
from ._models import FINAL_STATUSES

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime


def sole_pending(execution_id: str, pending: Sequence[str]) -> str | None:
    """The path a claim that names none is for: the one in ``pending`` (sorted), or None.

    Raises:
        NoPendingInterrupt: Several interrupts are pending; the claimer must name one.
    """
    if len(pending) > 1:
        raise NoPendingInterrupt(execution_id, None, list(pending))
    return pending[0] if pending else None


def failed_claim(
    execution_id: str,
    path: str | None,
    *,
    status: str | None,
    pending: Sequence[str] = (),
    last_resumed: str | None = None,
    held: tuple[str, datetime] | None = None,
    cancelling: bool = False,
) -> StoreError:
    """The error for a claim at ``path`` that consumed nothing, from what the store holds now.

    Args:
        execution_id: The execution claimed.
        path: The path claimed; None if nothing was pending where the claimer did not say.
        status: The execution's status; None if there is no such execution.
        pending: The paths pending now, sorted.
        last_resumed: The path of the execution's last ``resumed`` entry (at ``path``,
            when given); None if there is none.
        held: ``(owner, expires_at)`` of a live lease another process holds, if a store
            refuses a claim for it without saying why (Postgres's one statement).
        cancelling: A cancel is recorded and not yet carried out: the execution will not
            continue, so it is answered as cancelled (claims refuse it).

    Returns:
        `ExecutionNotFound`; `LeaseHeld` when what is pending waits for the lease's
        holder; `AlreadyResumed` when the interrupt is still pending (a ``seq`` of an
        earlier suspension) or a decision was journaled; `ExecutionFinished`; else
        `NoPendingInterrupt`, naming what is pending.
    """
    if status is None:
        return ExecutionNotFound(execution_id)
    if cancelling and status not in FINAL_STATUSES:
        status = "cancelled"
    if held is not None and path is not None and path in pending:
        return LeaseHeld(execution_id, *held)
    # A decision already journaled answers a second click, even once the run has finished;
    # but a cancelled (or timed out) execution is said to be so, whatever was decided before.
    if status not in ("cancelled", "timed_out"):
        if path is not None and (path in pending or last_resumed is not None):
            return AlreadyResumed(execution_id, path)
        if last_resumed is not None:
            return AlreadyResumed(execution_id, last_resumed)
    if status in FINAL_STATUSES:
        return ExecutionFinished(execution_id, status)
    return NoPendingInterrupt(execution_id, path, list(pending))
