"""`RetryPolicy`: try a step again after it fails, waiting a durable backoff in between.

A retried step is a chain node, a tool call or an LLM call (or any awaitable a
durable actor runs through `RetryPolicy.call`). Its attempts belong to the
message being handled, as its durable steps do:

- before waiting for attempt ``n + 1``, attempt ``n``'s failure is journaled (a
  ``retry`` entry: the attempt, the error's type and message, when it failed and
  when the next attempt is due), keyed by the step's path and ``n``;
- the wait is a durable timer (`tether.runtime.sleep` underneath, due at the
  journaled time): the execution parks with no lease held; the process that
  drives the run waits it out itself, and if that process dies, a worker or the
  next ``run()``/``resume()`` continues at the due time;
- every attempt after the first runs in a fresh handling of the message, which
  reads the journaled failures back first: attempt numbers continue exactly
  across crashes and restarts, and ``@idempotent`` calls an earlier attempt made
  before it failed return their records, as on any re-handling;
- when the policy gives up on a step it retried, that last failure is journaled
  too (``gave_up``): a failed run continued later (`Runner.retry`) starts the
  step on a fresh set of attempts, numbered on from the last.

Jitter is random once, when a failure is journaled; replays read the due time,
so every replay waits for the same moment.

Outside an execution (no durable actor of `Runtime.run` handling a message)
there is nowhere to journal: attempts are retried in this process with
``anyio.sleep`` between them, and a crash forgets them.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

import anyio
from tether.stores import ConfigurationError, StoreError, TetherError, UsageError

from . import telemetry
from .errors import StepTimeout
from .idempotent import current_step
from .interrupt import Parked, current_call, current_segment
from .timers import _park_until

if TYPE_CHECKING:
    from collections.abc import Awaitable

T = TypeVar("T")

RetryOn: TypeAlias = tuple[type[BaseException], ...] | Callable[[BaseException], bool]
"""What a policy retries: exception classes, or a function of the error saying yes or no."""

_NEVER: tuple[type[BaseException], ...] = (StoreError, ConfigurationError, UsageError)
"""Never retried, whatever ``retry_on`` says: the store's own failures (an outage is the runtime's
to ride out, a lost lease means stop), and mistakes in code or definitions (the same again)."""

_MESSAGE_LIMIT = 1000  # characters of an error's message kept in its journal entry


@dataclass(frozen=True, init=False)
class RetryPolicy:
    """How often, and how patiently, a failing step is tried again.

    Give one to a chain node (``add_node(fn, retry=...)``), a tool
    (``FunctionTool(fn, retry=...)``) or an agent's LLM calls
    (``Agent(..., llm_retry=...)``). After attempt ``n`` fails with an error the
    policy retries, attempt ``n + 1`` runs once
    ``min(initial * multiplier ** (n - 1), maximum)`` seconds have passed, give or
    take ``jitter``; after ``max_attempts`` attempts the step fails with the last
    error (a note on it says how many attempts were made). Each attempt gets the
    step's whole ``timeout=``. A failed run continued with ``runner.retry(id)``
    gives the step a fresh set of attempts.

    The wait is durable: the failure and the due time are journaled first, and
    the execution parks until then with no lease held. Attempt numbers survive
    a crash during the wait; the next attempt runs at the journaled time.

    What is retried: with a tuple, the errors that are instances of one of its
    classes. tether's own errors (`TetherError`) are left out unless the tuple
    names their class: ``(Exception,)``, the default, retries your code's errors,
    not a `MaxTurnsExceeded` or an ``LLMError``. `StepTimeout` counts as your
    code's: a step that ran past its timeout is tried again. A callable decides
    for itself. An exception group is retried when every error in it is. Never
    retried, whatever ``retry_on`` says: a pause (``interrupt()``, a durable
    sleep) and a cancellation, which pass through as they are; the store's own
    errors (`StoreUnavailable` is the runtime's to ride out, `StaleLease` means
    this process lost the execution); `ConfigurationError` and `UsageError`.

    Args:
        max_attempts: Attempts in all, the first included (1: no retry).
        initial: Seconds (or a ``timedelta``) before the second attempt.
        maximum: The longest wait between two attempts (seconds or a ``timedelta``).
        multiplier: Each wait is this many times the one before (1: constant waits).
        jitter: A fraction: each wait is drawn uniformly within ``±jitter`` of its
            value (0.1: ±10%), so that runs that failed together do not retry together.
        retry_on: Exception classes (one, or a tuple), or a function of the error
            returning whether to retry it.

    Raises:
        ConfigurationError: A value out of range (the message says which), or
            ``retry_on`` is neither exception classes nor a callable.

    Example:
        ```python
        chain.add_node(fetch_quote, timeout=30, retry=RetryPolicy(max_attempts=5, initial=2))
        FunctionTool(lookup_order, retry=RetryPolicy(retry_on=(ConnectionError, TimeoutError)))
        # LLM calls: tether.actors.LLM_RETRY's errors (429, 5xx, timeouts), more patiently.
        Agent("bot", llm=llm, llm_retry=dataclasses.replace(LLM_RETRY, max_attempts=6, maximum=300))
        ```
    """

    max_attempts: int
    initial: float
    maximum: float
    multiplier: float
    jitter: float
    retry_on: RetryOn

    def __init__(
        self,
        *,
        max_attempts: int = 3,
        initial: float | timedelta = 1.0,
        maximum: float | timedelta = 60.0,
        multiplier: float = 2.0,
        jitter: float = 0.1,
        retry_on: type[BaseException] | RetryOn = (Exception,),
    ) -> None:
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise ConfigurationError(
                f"RetryPolicy(max_attempts={max_attempts!r}): give a whole number of attempts, the first "
                f"included, at least 1 (max_attempts=1 tries once and never retries)."
            )
        first = _seconds(initial, "initial")
        longest = _seconds(maximum, "maximum")
        if not longest >= first:
            raise ConfigurationError(
                f"RetryPolicy(initial={initial!r}, maximum={maximum!r}): the longest wait cannot be shorter "
                f"than the first. Raise maximum, or lower initial."
            )
        factor = _number(multiplier, "multiplier")
        if not factor >= 1:  # also NaN
            raise ConfigurationError(
                f"RetryPolicy(multiplier={multiplier!r}): waits may stay the same (1) or grow (2 doubles "
                f"them), never shrink. Give a multiplier of 1 or more."
            )
        spread = _number(jitter, "jitter")
        if not 0 <= spread < 1:
            raise ConfigurationError(
                f"RetryPolicy(jitter={jitter!r}): jitter is a fraction of each wait, at least 0 and below 1 "
                f"(0.1 draws each wait within ±10%)."
            )
        if isinstance(retry_on, type):
            retry_on = (retry_on,)
        if isinstance(retry_on, tuple):
            wrong = [c for c in retry_on if not (isinstance(c, type) and issubclass(c, BaseException))]
            if wrong or not retry_on:
                raise ConfigurationError(
                    f"RetryPolicy(retry_on={retry_on!r}): give exception classes, e.g. retry_on=(ConnectionError, "
                    f"TimeoutError), or a function of the error returning whether to retry it."
                )
        elif not callable(retry_on):
            raise ConfigurationError(
                f"RetryPolicy(retry_on={retry_on!r}): give exception classes, e.g. retry_on=(ConnectionError, "
                f"TimeoutError), or a function of the error returning whether to retry it."
            )
        for name, value in (("max_attempts", max_attempts), ("initial", first), ("maximum", longest),
                            ("multiplier", factor), ("jitter", spread), ("retry_on", retry_on)):
            object.__setattr__(self, name, value)  # frozen: set once, here

    def retries(self, error: BaseException) -> bool:
        """Whether this policy tries a step again after ``error`` (attempts left aside)."""
        if isinstance(error, BaseExceptionGroup):
            return bool(error.exceptions) and all(self.retries(inner) for inner in error.exceptions)
        if not isinstance(error, Exception) or isinstance(error, _NEVER):
            return False  # a pause or a cancellation is no Exception: it passes through
        if not isinstance(self.retry_on, tuple):
            return bool(self.retry_on(error))
        named = [cls for cls in self.retry_on if isinstance(error, cls)]
        if isinstance(error, TetherError) and not isinstance(error, StepTimeout):
            return any(issubclass(cls, TetherError) for cls in named)  # tether's own: only when named
        return bool(named)

    def delay(self, attempt: int) -> float:
        """Seconds to wait after attempt ``attempt`` (1, 2, ...) failed, before jitter."""
        if attempt < 1:
            raise UsageError(f"RetryPolicy.delay({attempt}): attempts are numbered from 1.")
        if self.multiplier == 1:
            return self.initial
        # Compared as logarithms: a long run of attempts would overflow multiplier ** n.
        if (attempt - 1) * math.log(self.multiplier) >= math.log(self.maximum / self.initial):
            return self.maximum
        return min(self.initial * self.multiplier ** (attempt - 1), self.maximum)

    def _jittered(self, attempt: int) -> float:
        wait = self.delay(attempt)
        return wait * random.uniform(1 - self.jitter, 1 + self.jitter) if self.jitter else wait

    async def call(self, fn: Callable[..., Awaitable[T]], /, *args: Any, path: str | None = None) -> T:
        """``await fn(*args)`` as one attempt of a step retried under this policy.

        Inside a durable actor of an execution, the attempt is the one the journal
        says is next: after a journaled failure, the call parks until its due time
        (the message is handled again then), and a failure that will be retried is
        journaled and parks (`Parked`, a pause the runtime handles: do not catch
        it). Outside, it retries here, with ``anyio.sleep`` in between.

        Args:
            fn: The attempt: an async function (for blocking code, one that awaits
                ``anyio.to_thread.run_sync``).
            args: Its arguments.
            path: Names the step in the journal and in errors; unique among the steps
                of the message (default: the current call's path, ``chain:c/node:n``).

        Returns:
            What the first attempt that succeeds returns.

        Raises:
            Exception: The last attempt's error, once the policy gives up on it.
        """
        step, scope = current_step.get(), current_call.get()
        segment = current_segment() or ""
        if path is None:
            actor = scope.actor_path if scope is not None else ""
            path = f"{actor}/{segment}".strip("/") or "step"
        if step is None or scope is None:
            return await self._call_here(fn, args, path)
        # Attempts are numbered on for good; the policy counts those since it last gave up (a
        # failed run continued with `Runner.retry` gives the step a fresh set of attempts).
        attempt = first = 1
        while (key := f"{segment}|retry:{path}:{attempt}") in step.recorded:
            step.replayed.add(key)  # replayed progress of this call, as its timer's (see `patched`)
            failed = step.recorded[key]
            if isinstance(failed, dict) and failed.get("gave_up"):
                first = attempt + 1
            elif isinstance(failed, dict) and isinstance(failed.get("due"), str):
                # Waited out already, unless this handling came early (a recovery, say): then it parks again.
                await _park_until(datetime.fromisoformat(failed["due"]), _timer(path, attempt), here=True)
            attempt += 1
        tries = attempt - first + 1
        try:
            return await fn(*args)
        except Exception as exc:
            again = self._again(exc, tries, path, journaled=True)
            if not again and (tries == 1 or isinstance(exc, StoreError)):
                raise  # never retried: nothing to journal (and no store to journal to)
            failure = exc
        journal = step.journal
        failed_at = journal.hooks.now()
        record: dict[str, Any] = {"path": path, "attempt": attempt, "error": type(failure).__name__,
                                  "message": _text(failure), "failed_at": failed_at.isoformat()}
        if not again:
            # The last failure of a step that was retried is journaled too, so that every
            # failed attempt is, and a run continued later starts its step on a fresh set.
            await journal.record_step(step.inbox_seq, "retry", key, {**record, "gave_up": True, "due": None})
            raise failure
        wait = self._jittered(tries)
        next_due = failed_at + timedelta(seconds=wait)
        await journal.record_step(step.inbox_seq, "retry", key,
                                  {**record, "gave_up": False, "delay": wait, "due": next_due.isoformat()})
        telemetry.retried(path, attempt)
        await _park_until(next_due, _timer(path, attempt), here=True)
        # Due already (the write took longer than the wait): the next attempt still runs in a
        # fresh handling of the message, where @idempotent calls find the records made so far.
        raise Parked(next_due, here=True)

    async def _call_here(self, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...], path: str) -> T:
        """`call` with nowhere to journal: the attempts are retried in this process."""
        attempt = 1
        while True:
            try:
                return await fn(*args)
            except Exception as exc:
                if not self._again(exc, attempt, path, journaled=False):
                    raise
            telemetry.retried(path, attempt)
            await anyio.sleep(self._jittered(attempt))
            attempt += 1

    def _again(self, error: Exception, attempt: int, path: str, *, journaled: bool) -> bool:
        """Whether attempt ``attempt``'s ``error`` is retried; if not, a note on it says why it is the last."""
        retried = self.retries(error)
        if retried and attempt < self.max_attempts:
            return True
        if attempt > 1:  # a step tried once says nothing more than its error does
            earlier = " The earlier failures are journaled as 'retry' entries." if journaled else ""
            error.add_note(
                f"{path!r} gave up after {attempt} attempts (RetryPolicy(max_attempts={self.max_attempts}))."
                f"{earlier}" if retried else
                f"{path!r} failed on attempt {attempt} of {self.max_attempts} with an error its RetryPolicy "
                f"does not retry.{earlier}"
            )
        return False


def _seconds(value: float | timedelta, name: str) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else _number(value, name)
    if not (seconds > 0 and math.isfinite(seconds)):  # also NaN
        raise ConfigurationError(
            f"RetryPolicy({name}={value!r}): a wait is a positive, finite number of seconds or a "
            f"timedelta, e.g. {name}=1.5 or {name}=timedelta(seconds=90)."
        )
    return seconds


def _number(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"RetryPolicy({name}={value!r}): give a number.")
    return float(value)


def _timer(path: str, attempt: int) -> str:
    """What the durable timer of the wait after ``attempt`` is keyed by: its own for each wait."""
    return f"retry:{path}:{attempt}"


def _text(error: BaseException) -> str:
    """An error's message as a journal entry keeps it: bounded, and text every store can hold."""
    text = str(error)[:_MESSAGE_LIMIT].replace("\x00", "\\x00")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
