"""Number each locked job when it is published: its user's jobs start in that order.

A ``before_task_publish`` handler, so every publisher (``delay``,
``apply_async``, ``send_task``, the scheduler) numbers jobs the same way. A
job that already carries a number (a Celery retry, a handover, a Redis-down
re-enqueue) keeps it. A job published with an eta is numbered when it
arrives at a worker instead: it must not hold up the jobs published after it
but due before it. If Redis is down at publish time the job goes out
unnumbered and takes its place on arrival (it still never runs unlocked).
"""

from __future__ import annotations

import logging
import time
from datetime import datetime
from typing import Any

from celery.signals import before_task_publish

from config.errors import LockUnavailable
from tasks.distlock.runtime import lock_spec_of, runtime
from tasks.distlock.tickets import EPOCH, SEQ, SINCE

log = logging.getLogger("recur.distlock")


def _eta_timestamp(eta: Any) -> float:
    return datetime.fromisoformat(str(eta)).timestamp()


@before_task_publish.connect
def number_locked_job(sender: str | None = None, body: Any = None,
                      headers: dict[str, Any] | None = None, **_: Any) -> None:
    """Give a newly published locked job its sequence number and submission time."""
    from tasks.app import app

    spec = lock_spec_of(app.tasks.get(sender)) if sender else None
    if spec is None or headers is None or headers.get(SEQ) is not None:
        return
    if headers.get(SINCE) is None:  # a re-enqueue keeps the time of first submission
        headers[SINCE] = _eta_timestamp(headers["eta"]) if headers.get("eta") else time.time()
    if headers.get("eta"):
        return
    args, kwargs = (body[0], body[1]) if isinstance(body, (list, tuple)) else ((), {})
    user = spec.user_of(args, kwargs)
    try:
        seq, epoch = runtime().store.submit(user)
    except LockUnavailable as exc:
        log.warning("publishing job %s of user %s unnumbered: %s; it takes its place in "
                    "line when it reaches a worker", headers.get("id"), user, exc)
        return
    headers[SEQ], headers[EPOCH] = seq, epoch
