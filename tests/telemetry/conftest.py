"""Telemetry on for one test: the OpenTelemetry SDK's in-memory span exporter and metric reader."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tether.runtime import telemetry
from tether.runtime._core.telemetry import reset


@dataclass
class Traced:
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer_provider: TracerProvider
    meter_provider: MeterProvider

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def take(self) -> list[ReadableSpan]:
        """The spans finished so far; the next call returns only later ones."""
        spans = self.spans()
        self.exporter.clear()
        return spans

    def points(self, name: str) -> list[Any]:
        """The data points of the metric ``name``, as collected now."""
        data = self.reader.get_metrics_data()
        return [point for resource in (data.resource_metrics if data else []) for scope in resource.scope_metrics
                for metric in scope.metrics if metric.name == name for point in metric.data.data_points]


@pytest.fixture
def traced() -> Iterator[Traced]:
    exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    meter_provider = MeterProvider(metric_readers=[reader])
    telemetry.enable(tracer_provider, meter_provider)
    try:
        yield Traced(exporter, reader, tracer_provider, meter_provider)
    finally:
        reset()
        tracer_provider.shutdown()
        meter_provider.shutdown()
