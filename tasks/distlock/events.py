"""The lock's visible events: a log line and a Prometheus counter for each.

"skipped: user busy" is logged at INFO and counted every time a job is parked,
in this process's Prometheus registry and (by the Lua scripts) in the Redis
hash ``<prefix>:lock:stats`` summed over every worker.
"""

from __future__ import annotations

import logging

from prometheus_client import Counter

log = logging.getLogger("recur.distlock")

EVENTS = Counter("recur_lock_events", "Per-user lock events by kind and task.",
                 ["event", "task"])


def busy(task: str, job_id: str, user: str, seq: int) -> None:
    """The user was busy (or an earlier job of it had not started): the job is parked."""
    EVENTS.labels("skipped_busy", task).inc()
    log.info("skipped: user busy: task %s job %s user %s parked as #%d; it runs when the "
             "jobs before it have finished", task, job_id, user, seq)


def duplicate(task: str, job_id: str, user: str, seq: int) -> None:
    EVENTS.labels("duplicate", task).inc()
    log.warning("dropped: job %s (%s) of user %s #%d already finished; this is a second copy",
                job_id, task, user, seq)


def redis_down(task: str, job_id: str, user: str, delay: float, error: Exception) -> None:
    EVENTS.labels("redis_down", task).inc()
    log.warning("not run: lock of user %s unavailable for job %s (%s): %s; "
                "re-enqueued in %.1fs (fail closed)", user, job_id, task, error, delay)


def unlocked(task: str, job_id: str, user: str, error: Exception) -> None:
    EVENTS.labels("unlocked", task).inc()
    log.warning("running UNLOCKED: job %s (%s) of user %s: %s "
                "(RECUR_LOCK_WHEN_REDIS_DOWN=run-unlocked)", job_id, task, user, error)


def lease_lost(user: str, token: str) -> None:
    EVENTS.labels("lease_lost", "").inc()
    log.error("lock of user %s lost by its holder (token %s…): the lease expired under "
              "the task; its fencing token is stale", user, token[:8])


def handover_failed(user: str, job_id: str, error: Exception) -> None:
    EVENTS.labels("handover_failed", "").inc()
    log.warning("could not publish job %s of user %s after a handover: %s; the reaper "
                "hands it over again when the reservation expires", job_id, user, error)
