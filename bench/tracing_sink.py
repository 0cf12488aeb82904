"""The tracing benchmark's exporter: the SDK's batch processor in front of an exporter
that only counts (``RECUR_OTEL_SETUP=bench.tracing_sink:install``), so the figure is
recur's and the SDK's cost, not a collector's. Each process writes its running count
to ``$TRACING_BENCH_SPANS/<pid>``, which bench/bench_tracing.py sums: tracing was on."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

#: Directory of the per-process span counts.
COUNTS = "TRACING_BENCH_SPANS"


class CountingExporter(SpanExporter):
    """Drops spans, counting them (one small file write per exported batch)."""

    def __init__(self, directory: Path) -> None:
        self.count, self.path = 0, directory / str(os.getpid())

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.count += len(spans)
        self.path.write_text(str(self.count))
        return SpanExportResult.SUCCESS


def install(provider: TracerProvider) -> None:
    provider.add_span_processor(BatchSpanProcessor(CountingExporter(Path(os.environ[COUNTS]))))

