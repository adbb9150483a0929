"""State queries: what an actor of an execution holds, read from the store by anyone.

A query only reads: one read of the execution's row and journal together, no
lease, no write. So it answers from any process that reaches the store, while
another process runs the execution or while it waits days for a decision, and
leaves the run exactly as it was.

The state is the journal's, as of the actor's last boundary there: a handler
half-way through a message has not journaled what it changed yet, and a query
never sees it before it is durable. It is rebuilt the way `history` rebuilds
it, from the actor's snapshots and the deltas after them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict
from tether.runtime._core import delta
from tether.runtime._core.errors import ActorNotFound
from tether.stores import ExecutionNotFound, ExecutionStatus

from .history import state_change

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tether.stores import Execution, JournalEntry, Store


class ActorState(BaseModel):
    """One actor's state as of its last journaled boundary, as `query` gives it.

    Attributes:
        execution_id: The execution it belongs to.
        path: The actor's path, e.g. ``chain:refund`` or ``supervisor:planner/worker:auditor``.
        status: The execution's status when it was read (``running``, ``paused``, ``completed``...).
        state: The actor's state: the fields its journal set, from snapshots and deltas
            (fields left at their defaults do not appear, as in `history`).
        seq: The journal entry the state is as of: the actor's last one (0 when it
            has none yet, as in an execution still queued).
        label: What that entry was (``msg:3``, ``suspended``, ``completed``...); None with seq 0.
    """

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True)

    execution_id: str
    path: str
    status: ExecutionStatus
    state: dict[str, Any]
    seq: int
    label: str | None


async def query(store: Store, execution_id: str, path: str | None = None) -> ActorState:
    """The current journaled state of one actor of an execution, without touching the run.

    Reads the store once and writes nothing: no lease is taken, so it works
    while another process holds the execution, and from a process that has none
    of its code.

    Args:
        store: Where the execution lives.
        execution_id: The execution to look into.
        path: The actor's path (``supervisor:planner/worker:auditor``); None for
            the root actor. A call's path (a node, a tool) is not an actor's.

    Raises:
        ExecutionNotFound: No execution ``execution_id`` in ``store``.
        ActorNotFound: Its journal has no actor at ``path`` (the message lists those it has).

    Example:
        ```python
        await planner.run(request, execution_id="job-42")  # paused, waiting for a decision
        auditor = await query(store, "job-42", "supervisor:planner/worker:auditor")
        print(auditor.state, "as of", auditor.label)
        ```
    """
    loaded = await store.load_execution(execution_id)
    if loaded is None:
        raise ExecutionNotFound(execution_id)
    execution, journal = loaded
    actor = execution.root_path if path is None else path
    actors = actor_paths(execution, journal)
    if actor not in actors:
        raise ActorNotFound(execution_id, actor, actors)
    own = [entry for entry in journal if entry.path == actor]
    # Replayed with history's own reading of each entry, once over the actor's entries.
    state = delta.restore(change for entry in own if (change := state_change(entry)) is not None)
    last = own[-1] if own else None
    return ActorState(execution_id=execution_id, path=actor, status=execution.status, state=state,
                      seq=last.seq if last else 0, label=last.label if last else None)


def actor_paths(execution: Execution, journal: Sequence[JournalEntry]) -> set[str]:
    """The paths of the actors an execution's journal has, its root's always among them.

    Actors journal at their own path. A decision is the one entry that is not an
    actor's: the claim that consumed a pending interrupt writes it at the path
    of the call it answers (``chain:refund/node:approve``).
    """
    return {execution.root_path} | {entry.path for entry in journal if entry.kind != "resumed"}
