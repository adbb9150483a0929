"""Traces, metrics and logs of executions: OpenTelemetry when it is configured, nothing otherwise.

Telemetry is on in a process when OpenTelemetry is set up there: the
application installed a tracer or meter provider (the SDK's standard setup),
or the ``OTEL_*`` environment variables name an exporter (then tether sets the
SDK up from them, as OpenTelemetry's own zero-code setup does). `enable` and
`disable` decide it explicitly instead; ``TETHER_TELEMETRY=off`` keeps it off.

Off, nothing here imports OpenTelemetry, and every hook is a check of one
module attribute: `active` is None. The kernel calls the hooks at its
boundaries (an execution's segment, a message, a durable step, an interrupt, a
durable sleep); they live in `_otel`, which is imported only when telemetry
turns on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from tether.stores import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from tether.stores import Store

    from ._otel import Instruments, Opened
    from .journal import ActorJournal

active: Instruments | None = None
"""What this process measures with, or None: telemetry is off and every hook does nothing."""

_chosen = False
"""`enable` or `disable` was called: the environment is not looked at again."""
_missing = False
"""OpenTelemetry turned out not to be installed: said once, not looked for again."""
log = logging.getLogger("tether.runtime")

_NOTHING: contextlib.nullcontext[None] = contextlib.nullcontext()
_OFF = frozenset({"0", "off", "false", "no", "none"})
_EXPORTER_VARIABLES = ("OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
                       "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")


def enable(
    tracer_provider: Any = None,
    meter_provider: Any = None,
    *,
    record_content: bool | None = None,
    content_limit: int | None = None,
    store_spans: bool | None = None,
) -> None:
    """Turn telemetry on in this process, with these providers (default: OpenTelemetry's global ones).

    Args:
        tracer_provider: Where spans go (an SDK ``TracerProvider``).
        meter_provider: Where metrics go (an SDK ``MeterProvider``).
        record_content: Record prompts, replies, tool arguments and results on
            spans. Off by default (``TETHER_TELEMETRY_CONTENT=1`` turns it on):
            they may hold secrets and personal data.
        content_limit: The most characters of content recorded per attribute
            (``TETHER_TELEMETRY_CONTENT_LIMIT``, default 1000); longer is cut.
        store_spans: A child span for every store call (``TETHER_TELEMETRY_STORE_SPANS=1``).
            Store latency is measured either way, as a histogram.

    Raises:
        ConfigurationError: OpenTelemetry is not installed (``pip install 'tether[otel]'``).
    """
    global active, _chosen
    from ._otel import Instruments, options

    active = Instruments(tracer_provider, meter_provider,
                         **options(os.environ, record_content, content_limit, store_spans))
    _chosen = True


def disable() -> None:
    """Turn telemetry off in this process, whatever OpenTelemetry's setup or the environment say."""
    global active, _chosen
    active, _chosen = None, True


def reset() -> None:
    """Forget `enable`/`disable`: the setup and the environment decide again (for tests)."""
    global active, _chosen
    active, _chosen = None, False


def resolve(environ: Mapping[str, str] = os.environ) -> Instruments | None:
    """Whether a runtime made now measures, and with what: looked at each time a `Runtime` is made.

    OpenTelemetry is imported only when the application imported it already (it
    may have set a provider up) or the environment names an exporter.
    """
    global active
    if _chosen:
        return active
    if environ.get("TETHER_TELEMETRY", "").strip().lower() in _OFF:
        return None
    if "opentelemetry.trace" not in sys.modules and not any(environ.get(name) for name in _EXPORTER_VARIABLES):
        return None
    global _missing
    if _missing:
        return None
    try:
        from ._otel import configured
    except ConfigurationError as exc:  # OTEL_* set for the process, the extra not installed here
        _missing = True
        log.warning("telemetry stays off: %s", exc)
        return None
    active = configured(active, environ)
    return active


# -- the hooks the kernel calls: no-ops while telemetry is off -----------------------


def measured(store: Store) -> Store:
    """``store``, timed call by call (and counted boundary by boundary) while telemetry is on."""
    return store if active is None else active.measured(store)


def opened(why: str, *, execution_id: str, runner: str, root_path: str, version: str,
           parent: str | None) -> Opened | None:
    """A started span for one handling of an execution (``run``, ``resume``, ``recover``...), or None.

    ``parent``: the execution's journaled trace context, which it continues.
    Its trace context is `Opened.traceparent`, journaled by a new execution.
    """
    if active is None:
        return None
    return active.opened(why, execution_id=execution_id, runner=runner, root_path=root_path,
                         version=version, parent=parent)


def capture() -> object | None:
    """The trace context current now (a message carries its sender's), or None while telemetry is off."""
    return None if active is None else active.capture()


def message(journal: ActorJournal | None, path: str, message: object, sender: object | None,
            inbox_seq: int | None) -> contextlib.AbstractContextManager[Any]:
    """A span for the handling of one message by the actor at ``path``, a child of its sender's."""
    return _NOTHING if active is None else active.message(journal, path, message, sender, inbox_seq)


def paused() -> None:
    """The message being handled paused the actor (its span says so; a pause is not an error)."""
    if active is not None:
        active.paused()


def step(journal: ActorJournal, path: str, label: str, args: tuple[Any, ...] = ()
         ) -> contextlib.AbstractContextManager[Any]:
    """A span for one durable step that runs (``node:charge``, ``turn:2``, ``turn:2/tool:refund``)."""
    return _NOTHING if active is None else active.step(journal, path, label, args)


def interrupt(journal: ActorJournal, call_path: str, reason: str) -> contextlib.AbstractContextManager[Any]:
    """A span for an interrupt's suspension being journaled, with its pending row."""
    return _NOTHING if active is None else active.interrupt(journal, call_path, reason)


def sleeping(journal: ActorJournal, until: object) -> contextlib.AbstractContextManager[Any]:
    """A span for a durable sleep being journaled (the execution then waits with no process)."""
    return _NOTHING if active is None else active.sleeping(journal, until)


def verdict(status: str, runner: str) -> None:
    """An execution reached ``status`` (paused, completed, failed, ...)."""
    if active is not None:
        active.verdict(status, runner)


def resumed(after: float) -> None:
    """A decided execution runs again, ``after`` seconds after its decision was recorded."""
    if active is not None:
        active.resumed(after)


def took_over(*, dead: bool, forced: bool) -> None:
    """A lease was taken over from another owner before it expired."""
    if active is not None:
        active.took_over(dead=dead, forced=forced)


def retried(path: str, attempt: int) -> None:
    """A step failed and waits (durably) to be tried again."""
    if active is not None:
        active.retried(path, attempt)


def saw_pending(store: str, count: int, oldest_age: float) -> None:
    """A worker counted the interrupts pending in ``store``: the gauges report it."""
    if active is not None:
        active.saw_pending(store, count, oldest_age)


def saw_queues(store: str, rows: list[tuple[str, int, int]]) -> None:
    """A worker counted its store's queues: ``(queue, waiting, running)`` each, for the gauges."""
    if active is not None:
        active.saw_queues(store, rows)


def admitted(queue: str, waited: float) -> None:
    """A queue admitted an execution ``waited`` seconds after it was started into it."""
    if active is not None:
        active.admitted(queue, waited)


# -- for LLM adapters ---------------------------------------------------------------


def llm_call(*, provider: str, model: str, messages: object = None) -> contextlib.AbstractContextManager[Any]:
    """A span for one call to a model, with the OpenTelemetry GenAI attributes.

    The `Agent` opens one around every attempt of a turn's call to its LLM; an
    adapter reports what only it knows with `llm_usage`.
    """
    return _NOTHING if active is None else active.llm_call(provider=provider, model=model, messages=messages)


_tokens: ContextVar[list[int] | None] = ContextVar("tether_llm_tokens", default=None)


@contextlib.contextmanager
def tokens_used() -> Iterator[list[int]]:
    """The tokens `llm_usage` reports inside the block, one count per report (what a rate limit spends)."""
    counts: list[int] = []
    token = _tokens.set(counts)
    try:
        yield counts
    finally:
        _tokens.reset(token)


def llm_usage(*, input_tokens: int | None = None, output_tokens: int | None = None,
              finish_reasons: list[str] | None = None, response_model: str | None = None,
              response_id: str | None = None) -> None:
    """What a model's reply says about itself: token usage, why it stopped, which model answered.

    Call it from an LLM adapter's ``complete``: it goes on the span of that call
    (`llm_call`), and does nothing while telemetry is off.

    Example:
        ```python
        usage = body.get("usage", {})
        llm_usage(input_tokens=usage.get("prompt_tokens"), output_tokens=usage.get("completion_tokens"))
        ```
    """
    counts = _tokens.get()
    if counts is not None and (input_tokens or output_tokens):
        counts.append((input_tokens or 0) + (output_tokens or 0))
    if active is not None:
        active.llm_usage(input_tokens=input_tokens, output_tokens=output_tokens, finish_reasons=finish_reasons,
                         response_model=response_model, response_id=response_id)


def llm_reply(reply: object) -> None:
    """The model's reply, recorded on its call's span only when content recording is on."""
    if active is not None:
        active.llm_reply(reply)
