"""After a locked job, its worker process runs the user's next parked jobs itself.

A parked job's broker message was acknowledged when it parked; republishing
it would put it behind the whole queue, so a busy user would advance one job
per queue traversal. Instead the releasing process claims the handover and
runs the job at once, for up to RECUR_LOCK_CHAIN_SECONDS, then hands the rest
over through the broker, unless the queue it came from has nothing ready:
then no other job waits for this process and the chain goes on, checking the
queue again every RECUR_LOCK_CHAIN_SECONDS, for at most half the bucket's
soft time limit. The job stays in the user's parked set until its
release, so if this process dies the reaper hands it over again.

A job run this way that raises is put back ('again') and published through
the broker, where it runs once more with Celery's usual failure handling
(a second failure dead-letters it).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from celery.app.task import Context
from celery.exceptions import Ignore, Retry

from config.buckets import BUCKETS
from config.errors import LockUnavailable
from routing.queues import queue_depth
from tasks.distlock.grant import LockGrant
from tasks.distlock.held import Held
from tasks.distlock.runtime import Runtime, lock_spec_of, publish_handover
from tasks.distlock.store import Handover
from tasks.distlock.tickets import ParkedJob, Ticket

log = logging.getLogger("recur.distlock")

#: Request attribute telling the decorator that the lock is already held for it.
INLINE = "recur_lock_inline"


def run_chain(rt: Runtime, user: str, handover: Handover | None, parent: Any,
              ttl: float) -> None:
    """Run ``user``'s parked jobs here while their turn comes and time is left;
    ``ttl`` is the lease the handovers were reserved with."""
    period = rt.cfg.lock_chain_seconds
    started = time.monotonic()
    deadline, queue = started + period, (parent.delivery_info or {}).get("routing_key")
    ceiling = started + max(period, chain_ceiling(queue))
    while handover is not None:
        now = time.monotonic()
        if now >= deadline:
            if period <= 0 or now >= ceiling or others_waiting(queue):
                publish_handover(user, handover)
                return
            deadline = now + period
        handover, ttl = run_inline(rt, user, handover, parent, ttl)


def chain_ceiling(queue: str | None) -> float:
    """Seconds a chain may run when nothing else waits: half the soft time limit of
    the bucket whose queue delivered it (0 for a queue not in the bucket table)."""
    return next((b.soft_time_limit / 2 for b in BUCKETS if b.queue == queue), 0.0)


def others_waiting(queue: str | None) -> bool:
    """Whether ``queue`` has messages ready (True when it cannot be read: hand over)."""
    from tasks.app import app

    if queue is None:
        return True
    try:
        with app.pool.acquire(block=True, timeout=5) as conn:
            return queue_depth(conn, queue) > 0
    except Exception as exc:  # the broker decides nothing here: be fair, hand over
        log.debug("cannot read the depth of %s (%r): handing over", queue, exc)
        return True


def run_inline(rt: Runtime, user: str, handover: Handover, parent: Any,
               reserved_ttl: float) -> tuple[Handover | None, float]:
    """Run the job of ``handover`` here, holding its reserved lock; the next handover
    and the lease it was reserved with."""
    from tasks.app import app

    job = ParkedJob.from_json(handover.job)
    task = app.tasks.get(job.task)
    spec = lock_spec_of(task)
    if spec is None:  # not a locked task this worker knows: let the broker route it
        publish_handover(user, handover)
        return None, reserved_ttl
    # The release reserved the lock for handover.token: run the job holding it.
    grant = LockGrant(user, handover.token, handover.seq, handover.fence)
    ttl = spec.ttl or rt.cfg.lock_ttl
    if ttl != reserved_ttl:
        try:
            rt.store.extend(user, grant.token, ttl)
        except LockUnavailable as exc:
            log.warning("%s; job %s is handed over again when its reservation expires",
                        exc, job.id)
            return None, ttl
    ticket = Ticket(seq=handover.seq, epoch=handover.epoch, since=job.since,
                    handover=handover.token)
    held = Held(rt, grant, ttl, job.id, ticket.waited())
    headers = {**job.headers, **ticket.headers()}
    # A request of its own (not merged into the parent's), as if delivered: the
    # task's __call__ (e.g. the scheduler's dispatch check) runs as usual.
    task.request_stack.push(Context(
        id=job.id, args=job.args, kwargs=job.kwargs, headers=headers, **headers,
        hostname=parent.hostname, delivery_info=parent.delivery_info, called_directly=False,
        retries=0, root_id=job.id, user_lock=grant, **{INLINE: True}))
    try:
        held.run(lambda: task(*job.args, **job.kwargs))
    except (Retry, Ignore):
        pass
    except Exception as exc:
        held.outcome = "again"
        log.warning("job %s of user %s failed when run after the job before it: %r; it is "
                    "published to run once more through the broker", job.id, user, exc)
    finally:
        task.request_stack.pop()
    following = held.release()
    if held.outcome != "done" and following is not None:
        publish_handover(user, following)
        return None, ttl
    return following, ttl
