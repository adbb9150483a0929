"""The OpenTelemetry side of `telemetry`: imported only once telemetry is on.

Spans, by what runs (every one carries ``tether.execution_id``):

- ``run <runner>``, ``resume <runner>``, ``recover <runner>``, ``start <runner>``:
  one handling of an execution by one process, with ``tether.runner``,
  ``tether.version``, ``tether.agent_path`` (the root) and, once it lets go,
  ``tether.status``. The first is the trace's root (or a child of the caller's
  span); its context is journaled with the execution, and every later handling,
  in any process and on any day, is its child: one trace per execution. A
  later handling links to the caller's span instead (the request that decided).
- ``<actor> <Message>`` (``worker:auditor Task``): one message handled, a child
  of the span that sent it (the delegation, the handoff, the run).
- one span per durable step that runs (a replayed step does not run, so has
  none): ``node <name>``, ``turn``, ``execute_tool <name>``, ``handoff``,
  ``delegate``, ``reply``; ``chat <model>`` for each call to an LLM, with the
  GenAI semantic conventions' attributes; ``interrupt`` and ``sleep`` when a
  run pauses; with ``store_spans``, ``store <operation>`` for every store call.

A pause is not an error: its spans end with ``tether.paused = true``. An
exception is recorded on the span it left, with an error status.
"""

from __future__ import annotations

import contextlib
import inspect
import time
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from tether.stores import ConfigurationError

try:
    from opentelemetry import context as otel_context, metrics, trace
    from opentelemetry.trace import Link, SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError as exc:
    raise ConfigurationError(
        "Telemetry needs OpenTelemetry, which is not installed here: pip install 'tether[otel]'."
    ) from exc

from pydantic_core import to_json

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from opentelemetry.trace import Span
    from tether.stores import Store

    from .journal import ActorJournal

try:
    _VERSION = version("tether")
except PackageNotFoundError:  # pragma: no cover - run from a checkout that is not installed
    _VERSION = "0"

_TRACECONTEXT = TraceContextTextMapPropagator()
_JOURNAL_WRITES = frozenset({"append", "suspend"})
"""The store calls that journal boundaries: ``store.append(lease, entries)``, ``store.suspend(lease, entries, ...)``."""


def options(environ: Mapping[str, str], record_content: bool | None, content_limit: int | None,
            store_spans: bool | None) -> dict[str, Any]:
    """The content and store-span settings: the arguments given, else the ``TETHER_TELEMETRY_*`` variables."""
    def flag(name: str) -> bool:
        return environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")

    limit = content_limit
    if limit is None:
        text = environ.get("TETHER_TELEMETRY_CONTENT_LIMIT", "").strip()
        try:
            limit = int(text) if text else 1000
        except ValueError:
            raise ConfigurationError(
                f"TETHER_TELEMETRY_CONTENT_LIMIT={text!r} is not a number of characters, e.g. 2000."
            ) from None
    if limit < 1:
        raise ConfigurationError(f"content_limit={limit} must be 1 or more characters.")
    return {"record_content": flag("TETHER_TELEMETRY_CONTENT") if record_content is None else record_content,
            "content_limit": limit,
            "store_spans": flag("TETHER_TELEMETRY_STORE_SPANS") if store_spans is None else store_spans}


def configured(current: Instruments | None, environ: Mapping[str, str]) -> Instruments | None:
    """The instruments over OpenTelemetry's global providers, once they are set; None while neither is.

    A provider the application did not set is set up from the ``OTEL_*``
    variables when they name an exporter.
    """
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    tracer_provider, meter_provider = trace.get_tracer_provider(), metrics.get_meter_provider()
    if not _is_set(tracer_provider) and _named(environ, "TRACES"):
        tracer_provider = _tracer_provider_from(environ)
        trace.set_tracer_provider(tracer_provider)
    if not _is_set(meter_provider) and _named(environ, "METRICS"):
        meter_provider = _meter_provider_from(environ)
        metrics.set_meter_provider(meter_provider)
    if not (_is_set(tracer_provider) or _is_set(meter_provider)):
        return None
    if current is not None and current.providers == (tracer_provider, meter_provider):
        return current
    return Instruments(tracer_provider, meter_provider, **options(environ, None, None, None))


def _is_set(provider: object) -> bool:
    """Whether a global provider is one an application installed, not the API's placeholder."""
    # The API's stand-ins until a provider is set: ProxyTracerProvider, _ProxyMeterProvider, NoOp*.
    return not type(provider).__name__.lstrip("_").startswith(("Proxy", "NoOp"))


def _named(environ: Mapping[str, str], signal: str) -> bool:
    """Whether the environment asks for ``signal`` (TRACES, METRICS) to be exported."""
    exporter = environ.get(f"OTEL_{signal}_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get(f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT"))


def _exporter_name(environ: Mapping[str, str], signal: str) -> str:
    name = environ.get(f"OTEL_{signal}_EXPORTER", "").strip().lower() or "otlp"
    if name not in ("otlp", "console"):
        raise ConfigurationError(
            f"OTEL_{signal}_EXPORTER={name!r}: tether sets up 'otlp' (over HTTP) or 'console' itself. For "
            f"another exporter, set OpenTelemetry up in the application before the first Runtime."
        )
    return name


def _tracer_provider_from(environ: Mapping[str, str]) -> Any:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    provider = TracerProvider(resource=Resource.create())  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    if _exporter_name(environ, "TRACES") == "console":
        exporter: Any = ConsoleSpanExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()  # OTEL_EXPORTER_OTLP_* say where and how
    provider.add_span_processor(BatchSpanProcessor(exporter))  # flushed when the process exits
    return provider


def _meter_provider_from(environ: Mapping[str, str]) -> Any:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource

    if _exporter_name(environ, "METRICS") == "console":
        exporter: Any = ConsoleMetricExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        exporter = OTLPMetricExporter()
    # OTEL_METRIC_EXPORT_INTERVAL sets how often; the last export happens when the process exits.
    return MeterProvider(resource=Resource.create(), metric_readers=[PeriodicExportingMetricReader(exporter)])


class Opened:
    """A started span for one handling of an execution: current in `running`, ended after it."""

    def __init__(self, span: Span) -> None:
        self.span = span

    @property
    def traceparent(self) -> str:
        """Its W3C trace context, as an execution journals it."""
        carrier: dict[str, str] = {}
        _TRACECONTEXT.inject(carrier, context=trace.set_span_in_context(self.span))
        return carrier.get("traceparent", "")

    @contextlib.contextmanager
    def running(self) -> Iterator[Opened]:
        with _current(self.span):
            yield self

    def ended(self, status: str) -> None:
        """Where the execution stands as this handling lets go of it."""
        self.span.set_attribute("tether.status", status)


class Instruments:
    """tether's tracer and meter instruments over one pair of providers."""

    def __init__(self, tracer_provider: Any = None, meter_provider: Any = None, *, record_content: bool = False,
                 content_limit: int = 1000, store_spans: bool = False) -> None:
        self.providers = (tracer_provider, meter_provider)
        self.tracer = trace.get_tracer("tether", _VERSION, tracer_provider=tracer_provider)
        meter = metrics.get_meter("tether", _VERSION, meter_provider=meter_provider)
        self.record_content = record_content
        self.content_limit = content_limit
        self.store_spans = store_spans
        self.boundaries = meter.create_counter(
            "tether.boundaries", unit="{entry}", description="Journal entries written (message boundaries, steps).")
        self.store_duration = meter.create_histogram(
            "tether.store.duration", unit="s", description="How long each store call took, by operation.")
        self.executions = meter.create_counter(
            "tether.executions", unit="{execution}", description="Executions that reached a status, by status.")
        self.resume_latency = meter.create_histogram(
            "tether.resume.latency", unit="s", description="From a decision recorded to its execution running again.")
        self.takeovers = meter.create_counter(
            "tether.lease.takeovers", unit="{takeover}", description="Leases taken over before they expired.")
        self.retries = meter.create_counter(
            "tether.retries", unit="{retry}", description="Failed steps scheduled to be tried again.")
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}", description="Tokens used per LLM call.")
        self.queue_wait = meter.create_histogram(
            "tether.queue.wait", unit="s", description="From a start into a queue to the queue admitting it.")
        self.queues: dict[str, list[tuple[str, int, int]]] = {}
        """What workers last saw of each store's queues: (queue, waiting, running) each."""
        meter.create_observable_gauge("tether.queue.waiting", [self._queue_waiting], unit="{execution}",
                                      description="Executions ready in a queue and not admitted yet.")
        meter.create_observable_gauge("tether.queue.running", [self._queue_running], unit="{execution}",
                                      description="Executions of a queue running now.")
        self.pending: dict[str, tuple[int, float]] = {}
        """What workers last saw pending, by store: the count and the oldest's age in seconds."""
        meter.create_observable_gauge("tether.interrupts.pending", [self._pending_count], unit="{interrupt}",
                                      description="Pending interrupts, as a worker last counted them.")
        meter.create_observable_gauge("tether.interrupts.oldest_age", [self._pending_age], unit="s",
                                      description="Age of the oldest pending interrupt, as a worker last saw it.")

    # -- spans ----------------------------------------------------------------

    def opened(self, why: str, *, execution_id: str, runner: str, root_path: str, version: str,
               parent: str | None) -> Opened:
        links = []
        context = None
        if parent:
            context = _TRACECONTEXT.extract({"traceparent": parent})
            caller = trace.get_current_span().get_span_context()
            if caller.is_valid:
                links.append(Link(caller, {"tether.link": "caller"}))
        span = self.tracer.start_span(
            f"{why} {runner}", context=context, links=links,
            attributes={"tether.execution_id": execution_id, "tether.runner": runner, "tether.version": version,
                        "tether.agent_path": root_path, "tether.segment": why})
        return Opened(span)

    def capture(self) -> object:
        return otel_context.get_current()

    def message(self, journal: ActorJournal | None, path: str, message: object, sender: object | None,
                inbox_seq: int | None) -> contextlib.AbstractContextManager[Any]:
        kind = type(message).__name__
        attributes: dict[str, Any] = {"tether.agent_path": path, "tether.message.type": kind}
        if journal is not None:
            attributes["tether.execution_id"] = journal.lease.execution_id
        if inbox_seq is not None:
            attributes["tether.label"] = f"inbox:{inbox_seq}"
        if self.record_content:
            attributes["tether.message.content"] = self._content(message)
        span = self.tracer.start_span(f"{path.rpartition('/')[2]} {kind}", context=sender,  # type: ignore[arg-type]
                                      attributes=attributes)
        return _current(span)

    def paused(self) -> None:
        trace.get_current_span().set_attribute("tether.paused", True)

    def step(self, journal: ActorJournal, path: str, label: str, args: tuple[Any, ...]
             ) -> contextlib.AbstractContextManager[Any]:
        tail = label.rpartition("/")[2]
        head, _, name = tail.partition(":")
        name = name.partition("[")[0].partition("#")[0]
        attributes: dict[str, Any] = {"tether.execution_id": journal.lease.execution_id, "tether.agent_path": path,
                                      "tether.label": label}
        if head == "tool":
            title = f"execute_tool {name}"
            attributes.update({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name})
            if self.record_content and args:
                attributes["gen_ai.tool.call.arguments"] = self._content(getattr(args[0], "arguments", args[0]))
        else:
            title = head if not name or name.isdigit() else f"{head} {name}"
            if self.record_content and args:
                attributes["tether.step.input"] = self._content(args)
        return _current(self.tracer.start_span(title, attributes=attributes))

    def interrupt(self, journal: ActorJournal, call_path: str, reason: str) -> contextlib.AbstractContextManager[Any]:
        return _current(self.tracer.start_span("interrupt", attributes={
            "tether.execution_id": journal.lease.execution_id, "tether.agent_path": journal.path,
            "tether.interrupt.path": call_path, "tether.interrupt.reason": reason}))

    def sleeping(self, journal: ActorJournal, until: object) -> contextlib.AbstractContextManager[Any]:
        return _current(self.tracer.start_span("sleep", attributes={
            "tether.execution_id": journal.lease.execution_id, "tether.agent_path": journal.path,
            "tether.sleep.until": str(until)}))

    def llm_call(self, *, provider: str, model: str, messages: object) -> contextlib.AbstractContextManager[Any]:
        attributes: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": provider,
                                      "gen_ai.request.model": model}
        if self.record_content and messages is not None:
            attributes["gen_ai.input.messages"] = self._content(messages)
        span = self.tracer.start_span(f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes)
        return _current(span)

    def llm_usage(self, *, input_tokens: int | None, output_tokens: int | None, finish_reasons: list[str] | None,
                  response_model: str | None, response_id: str | None) -> None:
        span = trace.get_current_span()
        if not span.is_recording():
            return
        values = {"gen_ai.usage.input_tokens": input_tokens, "gen_ai.usage.output_tokens": output_tokens,
                  "gen_ai.response.finish_reasons": finish_reasons, "gen_ai.response.model": response_model,
                  "gen_ai.response.id": response_id}
        span.set_attributes({key: value for key, value in values.items() if value is not None})
        model = getattr(span, "attributes", {}).get("gen_ai.request.model", "")
        for kind, count in (("input", input_tokens), ("output", output_tokens)):
            if count is not None:
                self.tokens.record(count, {"gen_ai.token.type": kind, "gen_ai.request.model": model,
                                           "gen_ai.operation.name": "chat"})

    def llm_reply(self, reply: object) -> None:
        if self.record_content:
            span = trace.get_current_span()
            if span.is_recording():
                span.set_attribute("gen_ai.output.messages", self._content([reply]))

    def _content(self, value: object) -> str:
        """``value`` as JSON, cut to the content limit."""
        text = to_json(value, fallback=repr).decode()
        return text if len(text) <= self.content_limit else text[:self.content_limit] + "..."

    # -- metrics ----------------------------------------------------------------

    def verdict(self, status: str, runner: str) -> None:
        self.executions.add(1, {"tether.status": status, "tether.runner": runner})

    def resumed(self, after: float) -> None:
        self.resume_latency.record(after)

    def took_over(self, *, dead: bool, forced: bool) -> None:
        self.takeovers.add(1, {"tether.takeover.reason": "forced" if forced else "dead" if dead else "expired"})

    def retried(self, path: str, attempt: int) -> None:
        self.retries.add(1, {"tether.agent_path": path.rpartition("/")[0] or path})

    def saw_pending(self, store: str, count: int, oldest_age: float) -> None:
        self.pending[store] = (count, oldest_age)

    def saw_queues(self, store: str, rows: list[tuple[str, int, int]]) -> None:
        self.queues[store] = rows

    def admitted(self, queue: str, waited: float) -> None:
        self.queue_wait.record(waited, {"tether.queue": queue})

    def _queue_waiting(self, options: Any) -> Iterator[Any]:
        for store, rows in tuple(self.queues.items()):
            for queue, waiting, _ in rows:
                yield metrics.Observation(waiting, {"tether.store": store, "tether.queue": queue})

    def _queue_running(self, options: Any) -> Iterator[Any]:
        for store, rows in tuple(self.queues.items()):
            for queue, _, running in rows:
                yield metrics.Observation(running, {"tether.store": store, "tether.queue": queue})

    def _pending_count(self, options: Any) -> Iterator[Any]:
        for store, (count, _) in tuple(self.pending.items()):
            yield metrics.Observation(count, {"tether.store": store})

    def _pending_age(self, options: Any) -> Iterator[Any]:
        for store, (_, age) in tuple(self.pending.items()):
            yield metrics.Observation(age, {"tether.store": store})

    # -- the store ----------------------------------------------------------------

    def measured(self, store: Store) -> Store:
        return _Measured(store, self)  # type: ignore[return-value]


class _Measured:
    """A store whose every call is timed (and, with ``store_spans``, traced), and whose journal writes are counted."""

    def __init__(self, store: Store, instruments: Instruments) -> None:
        self._store = store
        self._instruments = instruments
        self._system = "postgresql" if "Postgres" in type(store).__name__ else \
            "sqlite" if "SQLite" in type(store).__name__ else type(store).__name__.lower()

    def __repr__(self) -> str:
        return repr(self._store)

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._store, name)
        if not inspect.iscoroutinefunction(attribute):
            return attribute
        instruments, system = self._instruments, self._system
        attributes = {"tether.store.operation": name, "db.system.name": system}

        async def call(*args: Any, **kwargs: Any) -> Any:
            span = instruments.tracer.start_span(f"store {name}", attributes=attributes) \
                if instruments.store_spans else None
            began = time.perf_counter()
            try:
                if span is None:
                    result = await attribute(*args, **kwargs)
                else:
                    with _current(span):
                        result = await attribute(*args, **kwargs)
            finally:
                instruments.store_duration.record(time.perf_counter() - began, attributes)
            if name in _JOURNAL_WRITES:
                instruments.boundaries.add(len(args[1]), {"db.system.name": system})
            elif name in ("claim", "claim_and_lease"):
                instruments.boundaries.add(1, {"db.system.name": system})  # the decision's entry
            elif kwargs.get("entries"):
                instruments.boundaries.add(len(kwargs["entries"]), {"db.system.name": system})
            return result

        setattr(self, name, call)  # made once per operation: later calls find it without __getattr__
        return call


@contextlib.contextmanager
def _current(span: Span) -> Iterator[Span]:
    """``span`` current while the block runs; how it ended recorded on it: a pause is not an error."""
    with trace.use_span(span, end_on_exit=True, record_exception=False, set_status_on_exception=False):
        try:
            yield span
        except Exception as exc:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"[:500]))
            raise
        except BaseException as exc:
            # A pause (interrupt(), a durable sleep, an actor that paused) or a cancellation.
            span.set_attribute("tether.paused" if _pauses(exc) else "tether.cancelled", True)
            raise


def _pauses(exc: BaseException) -> bool:
    from .interrupt import Suspension

    if isinstance(exc, BaseExceptionGroup):
        return any(_pauses(inner) for inner in exc.exceptions)
    return isinstance(exc, Suspension)

