"""Spans recorded in memory for a test: the SDK's provider set as the global one."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


def recorded_spans(monkeypatch: pytest.MonkeyPatch) -> InMemorySpanExporter:
    """The exporter of the spans ended from now until the test ends (``monkeypatch`` undoes
    the provider)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", provider)
    return exporter
