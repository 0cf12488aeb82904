"""The message headers tracing reads: one home for routing/tracing/ and its otel module."""

from __future__ import annotations

#: A dispatched message's stored trace context of the run that scheduled it (a W3C
#: traceparent); the run's span links to it.
LINK_HEADER = "recur_trace_link"
#: The scheduler's dispatch header: a run's span is labelled with its first item, the
#: job key.
from routing.request_headers import DISPATCH_HEADER, request_header  # noqa: E402

__all__ = ["DISPATCH_HEADER", "LINK_HEADER", "request_header"]
