"""A lock held for one job: run under the watchdog's lease, then released with the
job's outcome (a release Redis could not take is retried in the background)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from celery.exceptions import Ignore, Retry, TimeLimitExceeded

from config.errors import LockUnavailable, LockWaitExceeded
from config.settings import Settings
from tasks.distlock.job import LockGrant
from tasks.distlock.runtime import Lease, PendingRelease, Runtime
from tasks.distlock.store import Handover, Outcome

log = logging.getLogger("recur.distlock")


def check_budget(cfg: Settings, job_id: str, user: str, waited: float) -> None:
    """LockWaitExceeded (a permanent failure: dead-lettered) past the wait budget."""
    if waited > cfg.lock_wait_budget:
        raise LockWaitExceeded(f"job {job_id} of user {user} waited {waited:.0f}s for its "
                               f"turn, over RECUR_LOCK_WAIT_BUDGET={cfg.lock_wait_budget:g}s")


class Held:
    """A lock held for one job: ``run`` it under a watched lease, then ``release``."""

    def __init__(self, rt: Runtime, grant: LockGrant, ttl: float, job_id: str,
                 waited: float) -> None:
        self.rt, self.grant, self.ttl, self.job_id, self.waited = rt, grant, ttl, job_id, waited
        self.outcome: Outcome = "failed"

    def run(self, call: Callable[[], Any]) -> Any:
        """Call the job while the watchdog extends the lease; Retry and Ignore pass."""
        lease = Lease(self.grant.user, self.grant.token, self.ttl)
        self.rt.keeper.hold(lease)
        try:
            check_budget(self.rt.cfg, self.job_id, self.grant.user, self.waited)
            result = call()
            self.outcome = "done"
            return result
        except (Retry, TimeLimitExceeded):  # an async run given up at its hard limit is
            self.outcome = "retry"              # delivered again: it keeps its place
            raise
        except Ignore:
            self.outcome = "done"
            raise
        finally:
            self.rt.keeper.drop(lease)

    def release(self, chain: bool) -> Handover | None:
        """Release with the outcome; the next job (taken for this process if ``chain``
        and the job is done, else to publish)."""
        cfg, grant = self.rt.cfg, self.grant
        try:
            released, handover = self.rt.store.release(
                grant.user, grant.token, grant.seq, self.outcome, self.ttl,
                cfg.lock_gap_timeout, self.job_id, take=chain and self.outcome == "done")
        except LockUnavailable as exc:
            log.warning("%s; the release of job %s is retried in the background",
                        exc, self.job_id)
            self.rt.keeper.retry_release_later(PendingRelease(
                grant.user, grant.token, grant.seq, self.outcome, self.job_id))
            return None
        if not released:
            log.error("job %s finished but the lock of user %s had passed to another "
                      "holder; released nothing", self.job_id, grant.user)
        return handover
