"""OpenTelemetry tracing, off unless configured, and free when off.

Every spot that traces calls one function of this module: a span around the
scheduler's claim and publish, the store's write of a reschedule, the lock's
wait, the resequencer's hold and send; the W3C ``traceparent`` of the running
span, which a reschedule stores in its row (scheduler/wire.py ``with_trace``);
and the headers a dispatched message carries (the publish span's context, and
the stored context as :data:`LINK_HEADER`, which the next run's span links to:
a job's runs are one chain). Celery's own spans come from
``opentelemetry-instrumentation-celery`` (routing/tracing/otel.py).

Whether tracing is on is decided once per process (RECUR_OTEL, see
config/settings_tracing.py). Off, each call returns at its first test and
nothing of OpenTelemetry is ever imported; on, routing/tracing/otel.py does
the work. Worker processes set it up from routing/tracing/worker.py's hooks,
``recur scheduler`` at its start, any other process at its first traced call.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping, MutableMapping
from typing import Any, Protocol

from config.errors import ConfigError
from config.settings import Settings, settings
from routing.tracing.headers import LINK_HEADER

log = logging.getLogger("recur.tracing")

__all__ = ["LINK_HEADER", "NO_SPAN", "carry", "check", "on", "record", "setup", "shutdown",
           "span", "traceparent", "wanted"]
#: Standard OpenTelemetry variables that name an exporter (RECUR_OTEL=auto: on).
EXPORTER_VARS = ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
                 "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


class Span(Protocol):
    """What :func:`span` yields: set attributes, or drop a span that showed nothing."""

    def __enter__(self) -> Span: ...

    def __exit__(self, *exc: object) -> None: ...

    def set(self, **attrs: Any) -> None: ...

    def discard(self) -> None: ...


class Tracer(Protocol):
    """The tracing at work when it is on (routing/tracing/otel.py)."""

    def span(self, name: str, attrs: Mapping[str, Any]) -> Span: ...

    def record(self, name: str, since: float | None, attrs: Mapping[str, Any]) -> None: ...

    def traceparent(self) -> str | None: ...

    def inject(self, headers: MutableMapping[str, Any]) -> None: ...

    def shutdown(self) -> None: ...


class NoSpan:
    """The span of tracing off: does nothing, one shared instance."""

    __slots__ = ()

    def __enter__(self) -> NoSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def set(self, **attrs: Any) -> None:
        return None

    def discard(self) -> None:
        return None


NO_SPAN = NoSpan()
_tracer: Tracer | None = None
_decided = False
_guard = threading.Lock()


def wanted(cfg: Settings, environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process should trace: RECUR_OTEL=1, or =auto (the default) with an
    exporter named by the standard variables or RECUR_OTEL_SETUP (OTEL_SDK_DISABLED=true:
    off)."""
    if cfg.otel != "auto":
        return cfg.otel == "1"
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    named = [env.get(var, "").strip().lower() for var in EXPORTER_VARS]
    return bool(cfg.otel_setup) or any(value not in ("", "none") for value in named)


def setup(role: str = "recur") -> bool:
    """Decide once whether this process traces, and if so start OpenTelemetry (its
    TracerProvider unless the process made one, exporters, Celery's instrumentation);
    whether it is on. ``role`` names the service (recur-worker, recur-scheduler).
    ConfigError (one line) when tracing is asked for and cannot work."""
    global _tracer, _decided
    if _decided:
        return _tracer is not None
    with _guard:
        if not _decided:
            cfg = settings()
            if wanted(cfg):
                _tracer = _start(cfg, role)
            _decided = True
    return _tracer is not None


def _start(cfg: Settings, role: str) -> Tracer | None:
    try:
        from routing.tracing import otel
    except ImportError as exc:
        if cfg.otel == "1":
            raise ConfigError(f"RECUR_OTEL=1 but OpenTelemetry is not installed ({exc}): "
                              f"pip install 'recur[otel]'") from None
        log.warning("tracing: OTEL_* names an exporter but OpenTelemetry is not installed "
                    "(%s); tracing stays off (pip install 'recur[otel]')", exc)
        return None
    return otel.start(cfg, role)


def check() -> None:
    """At a worker's start, before its pool forks: refuse a tracing set-up that cannot
    work (ConfigError), without starting anything."""
    cfg = settings()
    if not wanted(cfg):
        return
    try:
        from routing.tracing import otel
    except ImportError:
        _start(cfg, "check")  # the same refusal (or warning) as at set-up
        return
    otel.check(cfg)


def on() -> bool:
    """Whether this process traces (decided at the first call)."""
    return setup() if not _decided else _tracer is not None


def span(name: str, **attrs: Any) -> Span:
    """A span around a block (attributes ``recur.<name>``), current inside it; off, the
    shared no-op."""
    if _tracer is None and (_decided or not setup()):
        return NO_SPAN
    assert _tracer is not None
    return _tracer.span(name, attrs)


def record(name: str, since: float | None, **attrs: Any) -> None:
    """A finished span from ``since`` (epoch seconds; None: now) to now: a wait that
    began before this process heard of it (a lock's line, a resequencer's hold)."""
    if _tracer is None and (_decided or not setup()):
        return
    assert _tracer is not None
    _tracer.record(name, since, attrs)


def traceparent() -> str | None:
    """The running span's W3C traceparent (None: off, or no span)."""
    if _tracer is None and (_decided or not setup()):
        return None
    assert _tracer is not None
    return _tracer.traceparent()


def carry(headers: MutableMapping[str, Any], link: str | None) -> None:
    """Headers of a dispatched message: the stored ``link`` (even when this process does
    not trace: the worker may), and with tracing on the current span's context."""
    if link is not None:
        headers[LINK_HEADER] = link
    if _tracer is not None:
        _tracer.inject(headers)


def shutdown() -> None:
    """Export what is buffered (a worker process ending)."""
    if _tracer is not None:
        _tracer.shutdown()
