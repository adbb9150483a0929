"""Control of an execution from any process that reaches its store: `cancel`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .service import Executions

if TYPE_CHECKING:
    from tether.runtime._core.execution import RunResult
    from tether.stores import Store


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
