"""`LLM_RETRY`: what an agent's LLM calls are retried on by default, and how patiently.

An LLM call that fails with an error worth repeating (a rate limit, an
overloaded server, a timeout, a dropped connection) is tried again after a
durable backoff; any other failure (a refused request, a bad answer) fails the
run at once. This is a layer above an adapter's own quick retries:
`OpenAIChatLLM` already repeats a 429 or a 5xx a few times within one call
(``max_retries``); once it gives up, the step's policy waits longer, durably.
"""

from __future__ import annotations

from tether.runtime import RetryPolicy, StepTimeout

from ._http import RETRIED_STATUSES, IncompleteStream, LLMError


def retriable_llm_error(error: BaseException) -> bool:
    """Whether an LLM call that failed with ``error`` is worth trying again.

    Yes for: an `LLMError` whose status is 408, 409, 429 or any 5xx; an
    `LLMError` without a status that a dropped connection or a timeout caused
    (`OpenAIChatLLM` gave up on the network); a `StepTimeout` (the agent's
    ``llm_timeout=``), any other ``TimeoutError``, and httpx's transport errors.
    An error of another client library that carries an integer ``status_code``
    (as the official SDKs' errors do) is judged by that code the same way.
    """
    import httpx  # here, not at import: with click and rich installed, httpx imports its CLI too

    if isinstance(error, StepTimeout | TimeoutError | httpx.TransportError | IncompleteStream):
        return True
    status = error.status if isinstance(error, LLMError) else getattr(error, "status_code", None)
    if isinstance(status, int) and not isinstance(status, bool):
        return status in RETRIED_STATUSES or status >= 500
    if isinstance(error, LLMError):  # no status: retried when the network failed under it
        cause = error.__cause__
        return isinstance(cause, TimeoutError | httpx.TransportError | IncompleteStream)
    return False


LLM_RETRY = RetryPolicy(max_attempts=3, initial=1.0, maximum=60.0, retry_on=retriable_llm_error)
"""The default ``llm_retry`` of `Agent` and `Supervisor`: three attempts, waiting about 1 s, then 2 s.

Retries what `retriable_llm_error` accepts. Pass ``llm_retry=None`` to fail at
the first error, or your own `RetryPolicy` (``dataclasses.replace(LLM_RETRY,
max_attempts=6)`` keeps what it retries on).
"""
