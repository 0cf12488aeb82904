"""Spans of real worker and scheduler processes, for the tracing tests.

``RECUR_OTEL_SETUP=tests.support.otel_sink:install`` in a process's environment
adds a processor that hands every finished span to the SDK's
``InMemorySpanExporter`` and writes it at once as one JSON line to a file of
its own (one per process) under ``$TRACING_TEST_SPANS``; the test reads them
all back with :func:`read_spans`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

#: The directory the spans go to (not a RECUR_ variable: those must be settings).
SPANS_DIR = "TRACING_TEST_SPANS"


def span_record(span: ReadableSpan) -> dict[str, Any]:
    """What a test asserts about a span, as plain JSON."""
    context = span.get_span_context()
    assert context is not None
    return {
        "name": span.name,
        "trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}",
        "parent": None if span.parent is None else f"{span.parent.span_id:016x}",
        "kind": span.kind.name, "start": span.start_time, "end": span.end_time,
        "attributes": dict(span.attributes or {}),
        "links": [{"trace_id": f"{link.context.trace_id:032x}",
                   "span_id": f"{link.context.span_id:016x}",
                   "attributes": dict(link.attributes or {})} for link in span.links],
        "service": span.resource.attributes.get("service.name"), "pid": os.getpid(),
        "status": span.status.status_code.name, "status_description": span.status.description,
        "events": [{"name": e.name, "attributes": dict(e.attributes or {})}
                   for e in span.events],
    }


class JsonLinesExporter(SpanExporter):
    """The SDK's in-memory exporter, its spans also written out as they finish."""

    def __init__(self, directory: Path) -> None:
        self.memory = InMemorySpanExporter()
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"spans-{os.getpid()}.jsonl"

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.memory.export(spans)
        with self.path.open("a") as out:
            for span in spans:
                out.write(json.dumps(span_record(span), default=str) + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.memory.shutdown()


def install(provider: TracerProvider) -> None:
    """RECUR_OTEL_SETUP's hook: every span written as it ends (no batching to wait for)."""
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(
        Path(os.environ[SPANS_DIR]))))


def read_spans(directory: Path) -> list[dict[str, Any]]:
    """Every span the processes wrote so far (a line being written is skipped)."""
    found = []
    for path in sorted(directory.glob("spans-*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                found.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return found
