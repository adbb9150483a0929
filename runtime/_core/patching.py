"""`patched()`: change the code of a node or tool while runs that started on the old code are paused in it.

A paused call is made again from its start when its run continues. If its code
changed meanwhile, the new code meets a journal written by the old: a decision
taken after a step the new code moved, an ``@idempotent`` record the new code
would number differently. ``if patched("change-id"):`` keeps both paths in the
code: the new one for calls that reach it for the first time on the new code,
the old one for calls that the old code already ran past it. The answer is
journaled with the actor's next boundary, so every later replay of the call
gets the same one.
"""

from __future__ import annotations

from tether.stores import UsageError

from .idempotent import current_step
from .interrupt import current_call, current_segment
from .journal import Carried

__all__ = ["patched"]


def patched(change_id: str) -> bool:
    """Whether the call running now takes the changed path named ``change_id``.

    True when this call is made for the first time on code that has the check
    (a new run, or a run that reaches this node or tool only now), False when it
    is made again after the old code began it: it paused in it (an interrupt,
    a durable sleep) or ran a durable step in it before this check existed.
    Whatever it answers first is what it answers on every replay, after a crash
    too. Sync and async code alike may call it; it never waits for the store.

    Outside an execution, nothing older could have run: it returns True.

    Example:
        ```python
        def approve(state):
            if patched("page-before-approval"):
                page_manager(state["amount"])  # new runs page the manager first
            return {"approved": interrupt("approval", state).approved}
        ```

    Raises:
        UsageError: ``change_id`` is not a non-empty string.
    """
    if not isinstance(change_id, str) or not change_id:
        raise UsageError(f"patched({change_id!r}): name the change with a non-empty string, e.g. 'page-first'.")
    step = current_step.get()
    if step is None:
        return True
    key = step.local_key("patched", change_id)
    recorded = step.recorded.get(key)
    if isinstance(recorded, bool):
        return recorded
    answer = not _begun_before(step.recorded, current_segment() or "")
    step.journal.carry(Carried(step.inbox_seq, "patched", key, answer))
    return answer


def _begun_before(recorded: dict[str, object], segment: str) -> bool:
    """Whether an earlier handling of this message did anything durable in the call ``segment``.

    Its decisions (the call paused and was answered) and its durable steps
    (a timer, a step of its own) are what the journal holds of it.
    """
    scope = current_call.get()
    inside = f"{scope.actor_path}/{segment}" if scope is not None and segment else None
    if scope is not None:
        for path in scope.decided:
            if inside is None or path == inside or path.startswith(inside + "/"):
                return True
    for key, value in recorded.items():
        if isinstance(value, bool) and "|patched|" in key:
            continue  # another check's answer is not progress
        where = key.partition("|")[0]
        if not segment or where == segment or where.startswith(segment + "/"):
            return True
    return False
