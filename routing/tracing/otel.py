"""Tracing at work: OpenTelemetry's SDK, Celery's instrumentation and recur's spans.

Imported only when tracing is on (routing/tracing/__init__.py decides). The
process's TracerProvider is the one it already has (an application that set
up OpenTelemetry itself keeps its own), else recur's: a batch processor per
exporter OTEL_TRACES_EXPORTER names (the SDK's entry points: ``console``,
``otlp`` once opentelemetry-exporter-otlp is installed, ``none``; default
``otlp``, or none when RECUR_OTEL_SETUP adds its own), then RECUR_OTEL_SETUP's
function. Celery's spans (``apply_async/<task>``, ``run/<task>``) come from
``CeleryInstrumentor``; a run's span gets a link to the stored context of the
run that scheduled it and its job key.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping, MutableMapping
from datetime import datetime
from importlib.metadata import entry_points
from typing import Any

from celery import signals
from opentelemetry import context, propagate, trace
from opentelemetry.instrumentation.celery import CeleryInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import SpanContext, Status, StatusCode

from config.errors import ConfigError
from config.settings import Settings
from routing.tracing.headers import DISPATCH_HEADER, LINK_HEADER
from routing.tracing.lean import LeanRuns, header, parse_traceparent

EXPORTERS = "opentelemetry_traces_exporter"


def _attributes(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """``recur.<name>`` attributes; a time as ISO 8601, None left out."""
    out: dict[str, Any] = {}
    for name, value in attrs.items():
        if value is None:
            continue
        if isinstance(value, datetime):
            value = value.isoformat()
        elif not isinstance(value, str | bool | int | float):
            value = str(value)
        out[f"recur.{name}"] = value
    return out


class RecurSpan:
    """A span current inside its ``with`` block; ended on exit unless discarded."""

    __slots__ = ("_keep", "_span", "_token")

    def __init__(self, tracer: trace.Tracer, name: str, attrs: Mapping[str, Any]) -> None:
        self._span = tracer.start_span(name, attributes=_attributes(attrs))
        self._keep = True
        self._token: Any = None

    def __enter__(self) -> RecurSpan:
        self._token = context.attach(trace.set_span_in_context(self._span))
        return self

    def __exit__(self, *exc: object) -> None:
        context.detach(self._token)
        error = exc[1] if len(exc) > 1 else None
        if isinstance(error, BaseException):
            self._span.record_exception(error)
            self._span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        if self._keep:
            self._span.end()

    def set(self, **attrs: Any) -> None:
        self._span.set_attributes(_attributes(attrs))

    def discard(self) -> None:
        """Never export this span (an empty claim: the scheduler polls all day)."""
        self._keep = False


def traceparent_of(span_context: SpanContext) -> str | None:
    """W3C traceparent text of a span context (None: invalid)."""
    if not span_context.is_valid:
        return None
    return (f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-"
            f"{span_context.trace_flags:02x}")


class OtelTracer:
    """routing.tracing's Tracer when on."""

    def __init__(self, provider: trace.TracerProvider, own: bool) -> None:
        self.provider, self.own = provider, own
        self.tracer = provider.get_tracer("recur")
        #: (span id, headers) of the last span injected: a batch's messages share it.
        self._injected: tuple[int, dict[str, str]] = (0, {})

    def span(self, name: str, attrs: Mapping[str, Any]) -> RecurSpan:
        return RecurSpan(self.tracer, name, attrs)

    def record(self, name: str, since: float | None, attrs: Mapping[str, Any]) -> None:
        start = None if since is None else int(since * 1e9)
        self.tracer.start_span(name, attributes=_attributes(attrs), start_time=start).end()

    def traceparent(self) -> str | None:
        return traceparent_of(trace.get_current_span().get_span_context())

    def inject(self, headers: MutableMapping[str, Any]) -> None:
        current = trace.get_current_span().get_span_context()
        if not current.is_valid:
            return
        span_id, carrier = self._injected
        if span_id != current.span_id:
            carrier = {}
            propagate.inject(carrier)
            self._injected = (current.span_id, carrier)
        headers.update(carrier)

    def shutdown(self) -> None:
        flush = getattr(self.provider, "force_flush", None)
        if self.own and flush is not None:
            flush()


def exporter_names(cfg: Settings) -> list[str]:
    """OTEL_TRACES_EXPORTER's names (default otlp; none when RECUR_OTEL_SETUP is set)."""
    names = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    names = names or ("none" if cfg.otel_setup else "otlp")
    return [n for n in (part.strip() for part in names.split(",")) if n and n != "none"]


def exporter_class(name: str) -> Callable[[], SpanExporter]:
    """The installed span exporter OTEL_TRACES_EXPORTER names (ConfigError if none)."""
    found = list(entry_points(group=EXPORTERS, name=name))
    if not found:
        known = sorted({point.name for point in entry_points(group=EXPORTERS)} | {"none"})
        hint = " (pip install opentelemetry-exporter-otlp)" if name.startswith("otlp") else ""
        raise ConfigError(f"OTEL_TRACES_EXPORTER: no span exporter {name!r} is installed"
                          f"{hint}; installed: {', '.join(known)}")
    cls: Callable[[], SpanExporter] = found[0].load()
    return cls


def setup_hook(cfg: Settings) -> Callable[[TracerProvider], object] | None:
    """RECUR_OTEL_SETUP's function (ConfigError when it cannot be imported)."""
    if not cfg.otel_setup:
        return None
    module, _, name = cfg.otel_setup.partition(":")
    try:
        hook: Callable[[TracerProvider], object] = getattr(importlib.import_module(module),
                                                           name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"RECUR_OTEL_SETUP={cfg.otel_setup!r}: cannot load it "
                          f"({type(exc).__name__}: {exc})") from None
    return hook


def check(cfg: Settings) -> None:
    """What :func:`start` would refuse, refused now, with nothing started."""
    for name in exporter_names(cfg):
        exporter_class(name)
    setup_hook(cfg)


def resource(role: str) -> Resource:
    """This process's resource: service.name recur-<role> unless OTEL_* names one."""
    named = ("OTEL_SERVICE_NAME" in os.environ
             or "service.name" in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", ""))
    return Resource.create({} if named else {"service.name": f"recur-{role}"})


def start(cfg: Settings, role: str) -> OtelTracer:
    """Start tracing in this process; Celery's spans from here on."""
    provider = trace.get_tracer_provider()
    own = isinstance(provider, trace.ProxyTracerProvider)
    if own:  # nobody set one: recur's, with the exporters asked for
        classes = [exporter_class(name) for name in exporter_names(cfg)]
        hook = setup_hook(cfg)
        sdk = TracerProvider(resource=resource(role))
        for cls in classes:
            sdk.add_span_processor(BatchSpanProcessor(cls()))
        if hook is not None:
            hook(sdk)
        trace.set_tracer_provider(sdk)
        provider = sdk
    if cfg.otel_celery == "lean":  # recur's own run spans (routing/tracing/lean.py)
        LeanRuns(provider.get_tracer("recur.celery")).connect()
        return OtelTracer(provider, own)
    instrumentor = CeleryInstrumentor()  # type: ignore[no-untyped-call]
    if not instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.instrument(tracer_provider=provider)
    # after the instrumentor's own prerun handler: the run's span is current
    signals.task_prerun.connect(link_run, weak=False)
    return OtelTracer(provider, own)


def link_run(task: Any = None, **_: Any) -> None:
    """Label a run's span with its job key and link it to the run that scheduled it."""
    current = trace.get_current_span()
    request = getattr(task, "request", None)
    if request is None or not current.is_recording():
        return
    dispatch = header(request, DISPATCH_HEADER)
    if isinstance(dispatch, list | tuple) and dispatch and isinstance(dispatch[0], str):
        current.set_attribute("recur.job_key", dispatch[0])
    previous = parse_traceparent(header(request, LINK_HEADER))
    if previous is not None:
        current.add_link(previous, {"recur.link": "scheduled by"})
