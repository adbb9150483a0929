"""How one step runs: within its ``timeout=``, or shielded from cancellation.

A step here is one chain node, one tool call or one LLM call. Its options are
checked when it is declared, so a bad combination fails at import time, not
hours into a run:

- ``timeout=`` cancels the step's own code through an anyio cancel scope around
  exactly that code (never around the journal write that records it) and raises
  `StepTimeout` in its place. The cancel scope only reports a timeout when it
  caught its own cancellation: a pause (`interrupt()`, a durable sleep) passes
  through as it is, and an enclosing cancellation (a cancelled execution, a
  process shutting down) stays that cancellation, on asyncio and trio alike.
- ``shielded=True`` runs the step inside `tether.runtime.shielded`: a cancel
  waits for it to finish.
- ``retry=`` (a `tether.runtime.RetryPolicy`) runs the step again after a failure
  it retries, around the timeout: each attempt gets the whole timeout, and the
  wait between attempts is durable (journaled, with no lease held).

``timeout=`` is refused for a synchronous function, which runs in a worker
thread. A thread cannot be cancelled, only abandoned (anyio's
``abandon_on_cancel``), and abandoning one is not safe here: it would go on
running after its step failed, next to the retry of the same step (the LLM
calling the tool again, a recovery running the node again), with its side
effects and its ``@idempotent`` records landing after the run moved on, or
after it ended, and it would keep the process from exiting. An async step
stops at its next ``await`` instead. For blocking code, give the blocking call
its own timeout (a socket's, an HTTP client's), or make the step async.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
from tether.runtime import RetryPolicy, StepTimeout
from tether.stores import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

T = TypeVar("T")


def step_seconds(timeout: float | timedelta | None, step: str, *, is_async: bool = True,
                 shielded: bool = False, setting: str = "timeout") -> float | None:
    """``timeout`` in seconds, checked against the step it is for (``step`` names it in errors).

    Raises:
        ConfigurationError: Not a positive number of seconds; given to a sync
            function (it runs in a thread that cannot be cancelled); or given
            with ``shielded=True`` (a step that must finish cannot be cut off).
    """
    if timeout is None:
        return None
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    if not seconds > 0:  # also NaN, which compares false with everything
        raise ConfigurationError(f"{setting}={timeout!r} for {step}: a timeout is a positive number of seconds.")
    if shielded:
        raise ConfigurationError(
            f"{step} has both {setting}= and shielded=True: a shielded step runs to its end, so it cannot "
            f"time out. Drop one of them."
        )
    if not is_async:
        raise ConfigurationError(
            f"{setting}={timeout!r} for {step}, a sync function: it runs in a worker thread, which a timeout "
            f"cannot stop. Make it async (`async def`), or give its blocking call a timeout of its own."
        )
    return seconds


async def within(seconds: float | None, path: str, fn: Callable[..., Awaitable[T]], *args: Any,
                 setting: str = "timeout") -> T:
    """``await fn(*args)``, cancelled after ``seconds`` (``None``: no limit) with `StepTimeout` for ``path``."""
    if seconds is None:
        return await fn(*args)
    with anyio.move_on_after(seconds):
        return await fn(*args)
    # Past the block only when the scope swallowed its own deadline's cancellation: the step
    # returned otherwise, or raised (its error, a pause, or a cancellation from outside) through it.
    raise StepTimeout(path, seconds, setting=setting)


def step_retry(retry: RetryPolicy | None, step: str, *, setting: str = "retry") -> RetryPolicy | None:
    """``retry``, checked to be a `RetryPolicy` (or None) for the step ``step`` names.

    Raises:
        ConfigurationError: Anything else, such as a number of attempts.
    """
    if retry is None or isinstance(retry, RetryPolicy):
        return retry
    raise ConfigurationError(
        f"{setting}={retry!r} for {step}: give a tether.runtime.RetryPolicy, e.g. "
        f"{setting}=RetryPolicy(max_attempts=3), or None for no retries."
    )


async def attempted(retry: RetryPolicy | None, path: str | None, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``await fn(*args)``: once, or as the attempts of ``retry`` for the step at ``path``."""
    if retry is None:
        return await fn(*args)
    return await retry.call(fn, *args, path=path)
