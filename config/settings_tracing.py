"""The tracing settings (RECUR_OTEL, RECUR_OTEL_SETUP), a base of ``Settings``.

They live apart because config/settings_fields.py is at its size limit; being a
base class, they are ordinary fields of ``Settings`` (read, checked and printed
by ``recur settings`` like every other; RECUR_OTEL's three values are checked
with the other choices in config/settings_bounds.py). What they switch on:
routing/tracing/.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class TracingSettings:
    """OpenTelemetry tracing: off unless configured (docs/operations.md, Tracing)."""

    otel: str = field(
        default="auto",
        metadata={"doc": "OpenTelemetry tracing (pip install 'recur[otel]'): 1 on, 0 off, "
                         "auto on when OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_ENDPOINT or "
                         "RECUR_OTEL_SETUP names an exporter. Off, recur imports nothing of "
                         "OpenTelemetry (docs/operations.md#tracing)."})
    otel_setup: str = field(
        default="",
        metadata={"doc": "'package.module:function' called with the TracerProvider recur "
                         "makes, to add your own span processors or exporters; empty: only "
                         "OTEL_TRACES_EXPORTER's (default otlp)."})
    otel_celery: str = field(
        default="full",
        metadata={"doc": "a run's span: full (opentelemetry-instrumentation-celery's) or lean "
                         "(recur's: the same span, name, parent, link and main attributes "
                         "at a fraction of the CPU; docs/operations.md#tracing)."})
