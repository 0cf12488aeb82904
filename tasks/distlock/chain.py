"""The chain: a process that releases a user's lock runs the user's next parked job
itself, holding the lock taken for it in the same Redis call, for up to
RECUR_LOCK_CHAIN_SECONDS (within the first delivery's time limits)."""

from __future__ import annotations

import logging
import time
from typing import Any

from celery.app.task import Context
from celery.exceptions import Ignore, Retry

from config.buckets_in_use import bucket_table
from config.errors import LockUnavailable
from config.settings import Settings
from scheduler.wire import DISPATCH_HEADER
from tasks.distlock.held import Held
from tasks.distlock.job import LockGrant, Ticket, number_key
from tasks.distlock.runtime import Runtime, lock_spec_of, task_events_on
from tasks.distlock.store import Handover
from tasks.distlock.unreadable import parked_job

log = logging.getLogger("recur.distlock")

#: Request attribute telling the decorator that the chain holds the lock for it.
INLINE = "recur_lock_inline"


def chain_seconds(cfg: Settings, request: Any) -> float:
    """How long after a delivery started its process may run the user's next jobs:
    RECUR_LOCK_CHAIN_SECONDS, at most half the soft time limit of the bucket whose
    queue delivered it (chained jobs run inside that delivery's time limits)."""
    queue = (getattr(request, "delivery_info", None) or {}).get("routing_key")
    half = next((b.soft_time_limit / 2 for b in bucket_table().buckets if b.queue == queue),
                cfg.lock_chain_seconds)
    return min(cfg.lock_chain_seconds, half)


def run_inline(rt: Runtime, user: str, handover: Handover, parent: Any, ttl: float,
               chain: bool) -> Handover | None:
    """Run the job of ``handover`` here, holding the lock taken for it; the next job.

    A job that raises is put back ('again') and published to run once more through
    the broker, where Celery's failure handling applies (a second failure
    dead-letters it). If this process dies, the job is still parked: a reaper
    publishes it when the lease expires.
    """
    from tasks.app import app

    # An entry that is no job is dropped: the next one comes instead.
    found = parked_job(rt.store, user, handover, rt.cfg)
    if found is None:
        return None
    job, handover = found
    task = app.tasks.get(job.task)
    spec = lock_spec_of(task)
    grant = LockGrant(user, handover.token, handover.seq, handover.fence)
    job_ttl = (spec.ttl if spec else None) or rt.cfg.lock_ttl
    key = number_key(job.id, job.headers.get(DISPATCH_HEADER))
    held = Held(rt, grant, job_ttl, key, Ticket(handover.seq, job.since).waited())
    if spec is None:  # not a locked task this worker knows: let the broker route it
        held.outcome = "again"
        return held.release(chain=False)
    if job_ttl != ttl and not extended(rt, grant, job_ttl):
        return None  # the lease is gone: a reaper publishes the job
    headers = {**job.headers, **Ticket(handover.seq, job.since).headers()}
    # A request of its own (not merged into the parent's), as if delivered: the
    # task's __call__ (e.g. the scheduler's dispatch check) runs as usual.
    task.request_stack.push(Context(
        id=job.id, task=job.task, args=job.args, kwargs=job.kwargs, headers=headers, **headers,
        hostname=parent.hostname, delivery_info=parent.delivery_info, called_directly=False,
        retries=0, root_id=job.id, user_lock=grant, **{INLINE: True}))
    began = time.monotonic()
    event(task, "task-started")
    try:
        held.run(lambda: task(*job.args, **job.kwargs))
        event(task, "task-succeeded", result="None", runtime=time.monotonic() - began)
    except (Retry, Ignore):
        pass
    except Exception as exc:
        held.outcome = "again"
        event(task, "task-failed", exception=repr(exc), traceback="")
        log.warning("job %s of user %s failed when run after the job before it: %r; it is "
                    "published to run once more through the broker", job.id, user, exc)
    finally:
        task.request_stack.pop()
    return held.release(chain=chain)


def event(task: Any, kind: str, **fields: Any) -> None:
    """A Celery task event for a job run by the chain (which has no delivery of its
    own), when the worker sends task events (``-E``): Flower then shows it run."""
    if not task_events_on():
        return
    try:
        task.send_event(kind, **fields)
    except Exception as exc:  # monitoring must not fail the job
        log.debug("could not send %s for job %s: %r", kind, task.request.id, exc)


def extended(rt: Runtime, grant: LockGrant, ttl: float) -> bool:
    """Whether the lease of ``grant`` now lasts ``ttl`` (False: lost or Redis down)."""
    try:
        return rt.store.extend(grant.user, grant.token, ttl)
    except LockUnavailable as exc:
        log.warning("%s; job #%d of user %s is published when its lease expires",
                    exc, grant.seq, grant.user)
        return False
