"""A small OTLP/HTTP receiver on 127.0.0.1: what the processes under test export, decoded.

It takes ``POST /v1/traces`` and ``POST /v1/metrics`` (protobuf, as
OpenTelemetry's HTTP exporter sends them) and keeps every span and metric
point, so a test can look at what several processes exported into one trace.
"""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


@dataclass(frozen=True)
class Span:
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    attributes: dict[str, Any]
    service: str
    links: tuple[str, ...] = ()
    """The span ids it links to."""


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


@dataclass
class Receiver:
    spans: list[Span] = field(default_factory=list)
    metrics: dict[str, list[Any]] = field(default_factory=dict)
    """Metric name -> its data points, across exports."""
    paths: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, path: str, body: bytes) -> None:
        with self.lock:
            self.paths.append(path)
            if path == "/v1/traces":
                request = ExportTraceServiceRequest.FromString(body)
                for resource in request.resource_spans:
                    service = str(_attributes(resource.resource.attributes).get("service.name", ""))
                    for scope in resource.scope_spans:
                        for span in scope.spans:
                            self.spans.append(Span(
                                span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex(), span.name,
                                _attributes(span.attributes), service, tuple(link.span_id.hex() for link in span.links)))
            elif path == "/v1/metrics":
                request = ExportMetricsServiceRequest.FromString(body)
                for resource in request.resource_metrics:
                    for scope in resource.scope_metrics:
                        for metric in scope.metrics:
                            kind = metric.WhichOneof("data")
                            self.metrics.setdefault(metric.name, []).extend(getattr(metric, kind).data_points)

    def named(self, name: str) -> list[Span]:
        with self.lock:
            return [span for span in self.spans if span.name == name]


class OTLPReceiver:
    """``with OTLPReceiver() as otlp:``: ``otlp.endpoint`` for OTEL_EXPORTER_OTLP_ENDPOINT, ``otlp.got``."""

    def __init__(self) -> None:
        self.got = Receiver()
        got = self.got

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                got.take(self.path, body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
