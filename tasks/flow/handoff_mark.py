"""The mark a worker's main process puts on a job whose rate limit it already took.

tasks/flow/handoff.py asks the limit for a prefork worker's jobs as they are handed to
the pool, several in one Redis round trip; a job allowed there carries this mark into
the pool process, whose ``@rate_limit`` then starts it without asking again. The mark
holds this worker's secret (made at start-up, inherited by the pool processes it forks):
a header sent by a publisher cannot carry it, so nobody outside the worker can skip a
limit. It holds the time the limit was asked too: a job that reaches a pool process
later than the limit forgives (tasks/flow/limiter.py ``forgiven_lateness``) asks again
as a late start (routing/gcra.lua mode ``late``), so a start is never further from the
time it was charged at than a late copy's may be.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from tasks.flow.limiter import forgiven_lateness
from tasks.flow.rates import Rate

#: The request field the mark travels in (the pool gets the request's fields as they are).
HEADER = "recur_rate_taken"
#: This worker's secret: the pool processes it forks have the same.
SECRET = secrets.token_hex(16)


def mark(asked_at: float) -> str:
    """The mark of a job allowed by a limit asked at ``asked_at`` (time.time())."""
    return f"{SECRET}:{asked_at!r}"


def state(request: Any, rate: Rate) -> str | None:
    """``"fresh"``: this worker's main process took ``request``'s slot just now, the job
    starts on it; ``"late"``: it took it longer ago than ``rate`` forgives (the job is
    asked again as a late start, out of its key's line it already left); None: no mark
    of this worker's."""
    value = getattr(request, HEADER, None)
    if not isinstance(value, str):
        return None
    secret, _, asked = value.partition(":")
    if not secrets.compare_digest(secret, SECRET):
        return None
    try:
        age = time.time() - float(asked)
    except ValueError:
        return None
    return "fresh" if 0.0 <= age <= forgiven_lateness(rate) else "late"
