"""Reading a custom header off a Celery request: one home for the scheduler's dispatch
check (scheduler/wire.py), the lock and tracing, all of which read the same headers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The scheduler's dispatch header: [job key, token, lease stamp, due stamp].
DISPATCH_HEADER = "recur_dispatch"


def request_header(request: Any, name: str) -> Any:
    """A message header as Celery exposes it: a request attribute, or in ``headers``."""
    value = getattr(request, name, None)
    headers = getattr(request, "headers", None)
    if value is None and isinstance(headers, Mapping):
        value = headers.get(name)
    return value
