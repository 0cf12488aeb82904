"""Parked entries that are not jobs (another program wrote them into a user's parked
jobs, or a value was overwritten): they can never run, and left at the head of the
line they would hold the user's later jobs forever."""

from __future__ import annotations

import logging

from config.settings import Settings
from tasks.distlock import job as jobs
from tasks.distlock.store import Handover, LockStore

log = logging.getLogger("recur.distlock")


def parked_job(store: LockStore, user: str, handover: Handover | None, cfg: Settings
               ) -> tuple[jobs.ParkedJob, Handover] | None:
    """The job of ``handover`` and the handover it came in. A parked entry that is not
    a job recur wrote can never run: it is dropped as a failed job (logged in full, one
    ERROR line naming the key), and the user's next job is taken instead. None: no
    job left to hand over (or the lock moved on meanwhile)."""
    while handover is not None:
        try:
            return jobs.ParkedJob.from_json(handover.job), handover
        except ValueError as exc:
            jobs.EVENTS.labels("unreadable", "").inc()
            log.error("dropped entry #%d of %s: not a parked job (%s): %.300r; the jobs of "
                      "user %s after it go on", handover.seq, store.user_keys(user)[3],
                      exc, handover.job, user)
        _, handover = store.release(user, handover.token, handover.seq, "failed",
                                    cfg.lock_ttl, cfg.lock_gap_timeout,
                                    take=bool(handover.token))
    return None
