"""Control of an execution from any process that reaches its store: `cancel`, `send_message`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError
from tether.runtime._core.errors import ActorNotFound
from tether.runtime._core.events import verdict_of
from tether.runtime._core.interrupt import loaded_model
from tether.runtime._core.journal import operator_name
from tether.stores import ConfigurationError, ExecutionFinished, ExecutionNotFound

from .query import actor_paths
from .service import Executions

if TYPE_CHECKING:
    from tether.runtime._core.execution import RunResult
    from tether.stores import Execution, JournalEntry, Store


async def cancel(store: Store, execution_id: str, *, reason: str = "", by: str | None = None,
                 force: bool = False, wait: float | None = None) -> RunResult:
    """Cancel an execution for good, from any process, wherever it runs or waits.

    Needs the store alone: no runner, no actor code. A paused, decided, queued or
    sleeping execution is cancelled at once; a running one is stopped by the
    process that runs it, which is told and cancels its in-flight node, tool or
    LLM call at its next ``await`` (a `shielded` block first reaches its end).
    The verdict (``cancelled``) journals ``by`` and ``reason``; its pending
    interrupts are gone, and a later decision for it is refused.

    Example:
        ```python
        result = await cancel(store, "refund-7", reason="customer withdrew", by="support:alice")
        assert result.status == "cancelled"
        ```

    Args:
        store: The execution's store.
        execution_id: Which execution.
        reason: Why (journaled with the verdict).
        by: Who (default: ``"python:<user>"`` of this process).
        force: Take over a lease held by a process that may be alive (see `Runtime.resume`).
        wait: Seconds to wait at most for a running execution to stop (None: until it
            has; 0: return at once, the request recorded).

    Returns:
        Where it stands then: ``cancelled``; the verdict it reached first; or
        ``running`` when it was still stopping as ``wait`` ran out.

    Raises:
        ExecutionNotFound: No such execution; nothing was recorded.
    """
    return await Executions(store).cancel(execution_id, reason=reason, by=by, force=force, wait=wait)


async def send_message(store: Store, execution_id: str, message: BaseModel | dict[str, Any], *,
                       path: str | None = None, by: str | None = None) -> JournalEntry:
    """Send a durable message to an actor of an execution, from any process: `wait_for` receives it.

    The message is journaled at once, in order, and delivered exactly once to
    the first ``wait_for`` of its type at ``path`` (the root actor by default),
    whether the execution is running now, paused waiting for it, or its process
    is down (then it is delivered after the recovery). A run parked waiting for
    it is marked for workers as it arrives. While an actor waits, a message is
    checked against the type it waits for before it is accepted; one sent before
    it waits is checked by ``wait_for`` when it reads it, and left for another
    wait if it is not that wait's type.

    Example:
        ```python
        await send_message(store, "refund-7", Approval(approved=True, by="alice"))
        ```

    Args:
        store: The execution's store.
        execution_id: Which execution.
        message: A pydantic model, or a JSON object.
        path: The receiving actor (``supervisor:planner/worker:auditor``); default: the root.
        by: Who sends it, journaled with it (default: ``"python:<user>"``).

    Returns:
        The message's journal entry (its ``seq`` orders it among the others).

    Raises:
        ExecutionNotFound: No such execution.
        ExecutionFinished: It has finished: nothing receives messages any more.
        ActorNotFound: No actor at ``path`` in its journal.
        ConfigurationError: ``message`` is not a JSON object, or the type an actor waits
            for is not defined in this process (send from one that loads the application).
        pydantic.ValidationError: It is not what the waiting actor waits for.

    Nothing is sent when it raises.
    """
    loaded = await store.load_execution(execution_id)
    if loaded is None:
        raise ExecutionNotFound(execution_id)
    execution, journal = loaded
    if execution.finished:
        raise ExecutionFinished(execution_id, execution.status)
    target = path if path is not None else execution.root_path
    actors = actor_paths(execution, journal)
    if target not in actors:
        raise ActorNotFound(execution_id, target, actors)
    data = message.model_dump(mode="json") if isinstance(message, BaseModel) else message
    if not isinstance(data, dict):
        raise ConfigurationError(f"A message is a pydantic model or a JSON object, not {type(message).__name__}: "
                                 f"send {{'text': ...}}, say; nothing was sent.")
    waited = _waited_for(execution, journal, target)
    if waited:
        _check_waited(execution_id, target, data, waited)
    who = by if by is not None else f"python:{operator_name()}"
    return await store.deliver_message(execution_id, target, data, by=who)


def _waited_for(execution: Execution, journal: list[JournalEntry], path: str) -> list[str]:
    """The message types the actor at ``path`` waits for in a paused execution, from its pause's verdict."""
    if execution.status != "paused":
        return []
    for entry in reversed(journal):
        payload: Any = entry.payload
        if verdict_of(entry) == "paused" and isinstance(payload, dict):
            waiting = payload.get("waiting")
            return [str(w.get("type")) for w in waiting or () if isinstance(w, dict) and w.get("path") == path]
    return []


def _check_waited(execution_id: str, path: str, data: dict[str, Any], waited: list[str]) -> None:
    """Refuse a message that none of the types the actor waits for accepts (the last one's error)."""
    error: ValidationError | None = None
    for name in waited:
        model = loaded_model(name)
        if model is None:
            raise ConfigurationError(
                f"{path!r} of {execution_id!r} waits for a {name.rpartition(':')[2]} message ({name}), which "
                f"this process does not define, so it cannot check this one; nothing was sent. Send it from a "
                f"process that loads the application's code (--app module:attr)."
            )
        try:
            model.model_validate(data)
        except ValidationError as exc:
            error = exc
        else:
            return
    assert error is not None
    raise error
