"""RECUR_OTEL_CELERY=lean: a run's span made by recur, without CeleryInstrumentor.

opentelemetry-instrumentation-celery costs about 50 µs of CPU per task (its
header extraction through a generic getter, some twenty request attributes read
and set twice, ``repr`` of the arguments, a runtime histogram), as much as a
no-op task; the SDK span alone is a fraction of that. Lean mode makes the same
``run/<task>`` span (kind CONSUMER, a child of the ``traceparent`` the message
carries, ``celery.action``, ``celery.task_name``, ``messaging.message.id``,
``messaging.destination``, ``celery.hostname``; with ``recur.job_key`` and the
link, error status on failure) from three Celery signals. What it leaves out:
the other request attributes, ``tracestate`` and baggage of the incoming
message, ``apply_async/<task>`` spans of producers, the runtime histogram.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from celery import signals
from opentelemetry import context, trace
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)

from routing.tracing.headers import DISPATCH_HEADER, LINK_HEADER, request_header

#: The attributes CeleryInstrumentor gives a run's span that lean mode keeps.
ACTION, TASK_NAME = "celery.action", "celery.task_name"
MESSAGE_ID, DESTINATION, HOSTNAME = "messaging.message.id", "messaging.destination", \
    "celery.hostname"


#: A message header off a request (the one reader, routing/request_headers.py).
header = request_header


def parse_traceparent(value: Any) -> SpanContext | None:
    """A stored traceparent as a remote span context (None: absent or malformed)."""
    if not isinstance(value, str):
        return None
    parts = value.strip().split("-")
    if len(parts) != 4 or len(parts[1]) != 32 or len(parts[2]) != 16 or len(parts[3]) != 2:
        return None
    try:
        found = SpanContext(int(parts[1], 16), int(parts[2], 16), is_remote=True,
                            trace_flags=TraceFlags(int(parts[3], 16)))
    except ValueError:
        return None
    return found if found.is_valid else None


class LeanRuns:
    """The run spans of one worker process, keyed by task id while they run."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer
        self.running: dict[str, tuple[trace.Span, object]] = {}

    def connect(self) -> None:
        signals.task_prerun.connect(self.prerun, weak=False)
        signals.task_postrun.connect(self.postrun, weak=False)
        signals.task_failure.connect(self.failure, weak=False)

    def prerun(self, task_id: str | None = None, task: Any = None, **_: Any) -> None:
        request = getattr(task, "request", None)
        if task_id is None or request is None:
            return
        parent = parse_traceparent(header(request, "traceparent"))
        ctx = None if parent is None else trace.set_span_in_context(NonRecordingSpan(parent))
        attrs: dict[str, Any] = {ACTION: "run", TASK_NAME: task.name, MESSAGE_ID: task_id}
        delivery = getattr(request, "delivery_info", None)
        if isinstance(delivery, Mapping) and delivery.get("routing_key") is not None:
            attrs[DESTINATION] = delivery["routing_key"]
        hostname = getattr(request, "hostname", None)
        if isinstance(hostname, str):
            attrs[HOSTNAME] = hostname
        dispatch = header(request, DISPATCH_HEADER)
        if isinstance(dispatch, list | tuple) and dispatch and isinstance(dispatch[0], str):
            attrs["recur.job_key"] = dispatch[0]
        previous = parse_traceparent(header(request, LINK_HEADER))
        links = None if previous is None else [trace.Link(previous,
                                                          {"recur.link": "scheduled by"})]
        span = self.tracer.start_span(f"run/{task.name}", context=ctx, kind=SpanKind.CONSUMER,
                                      attributes=attrs, links=links)
        self.running[task_id] = (span, context.attach(trace.set_span_in_context(span)))

    def postrun(self, task_id: str | None = None, **_: Any) -> None:
        found = self.running.pop(task_id, None) if task_id is not None else None
        if found is not None:
            span, token = found
            context.detach(token)  # type: ignore[arg-type]
            span.end()

    def failure(self, task_id: str | None = None, exception: BaseException | None = None,
                **_: Any) -> None:
        found = self.running.get(task_id) if task_id is not None else None
        if found is None:
            return
        span = found[0]
        if isinstance(exception, BaseException):
            span.record_exception(exception)
        span.set_status(Status(StatusCode.ERROR, str(exception)))
