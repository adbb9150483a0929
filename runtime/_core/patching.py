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

from .idempotent import Step, current_step
from .interrupt import current_call, current_segment
from .journal import Carried

__all__ = ["patched"]


def patched(change_id: str) -> bool:
    """Whether the call running now takes the changed path named ``change_id``.

    True when no code without the check went past this point of the call: a new
    run, a run that reaches this node or tool only now, or one whose earlier
    handling stopped before here. False when the old code went further in this
    call: it paused in it (an interrupt, answered or not, a durable sleep) or
    ran a durable step of it after this point. Whatever it answers first is what
    it answers on every replay, after a crash too. Sync and async code alike may
    call it; it never waits for the store. (``@idempotent`` records are not part
    of this: a call's effects are told apart by its steps and pauses.)

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
    answer = not _begun_before(step, current_segment() or "")
    step.journal.carry(Carried(step.inbox_seq, "patched", key, answer))
    return answer


def _begun_before(step: Step, segment: str) -> bool:
    """Whether an earlier handling of this message went past this point of the call ``segment``.

    The journal holds what earlier handlings did in the call, in order: its
    durable steps (a timer, a step of its own) and its suspensions (an
    interrupt, answered or not). A handling made again replays them in the same
    order. So at this check, if the journal holds more of the call than this
    handling has replayed so far, an earlier one went further on code without
    the check; if it holds exactly that much, nothing past this point was ever
    journaled, and the new path is as good as the first time.
    """
    scope = current_call.get()
    journaled = replayed = 0
    if scope is not None:
        inside = f"{scope.actor_path}/{segment}" if segment else scope.actor_path
        journaled += sum(1 for path in scope.suspended if _within(path, inside))
        replayed += sum(count for path, count in scope.taken.items() if _within(path, inside))
    for key in step.recorded:
        where, _, rest = key.partition("|")
        if rest.startswith("patched|") or (segment and not _within(where, segment)):
            continue  # another check's answer is not progress; another call's steps are its own
        journaled += 1
        replayed += key in step.replayed
    return replayed < journaled


def _within(path: str, inside: str) -> bool:
    return path == inside or path.startswith(inside + "/")
