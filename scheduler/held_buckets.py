"""Buckets whose queue refused the scheduler's publish, held back for a while.

A queue the broker refuses publishes to (nacks: full under an operator's
``max-length`` policy with ``overflow=reject-publish``; returns: the queue was
deleted) is that bucket's trouble, not an outage: the batch was not marked
dispatched (its rows stay due), the connection is still good, and the other
buckets go on being filled. The bucket is tried again after a doubling wait
(1 s up to 30 s), so a queue that stays full costs one claim and one refused
publish per wait, and one WARNING per try naming the queue and the cause.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from config.errors import PublishRefused

log = logging.getLogger("recur.scheduler")

#: First and longest wait before a refusing bucket is tried again (seconds).
FIRST_WAIT = 1.0
LONGEST_WAIT = 30.0


@dataclass
class HeldBuckets:
    """Per bucket: when it may be tried again, and the wait after its next refusal."""

    clock: Callable[[], float] = time.monotonic
    _until: dict[str, float] = field(default_factory=dict)
    _wait: dict[str, float] = field(default_factory=dict)

    def held(self, bucket: str) -> bool:
        """Whether ``bucket`` is still waiting after a refusal (not to be filled now)."""
        until = self._until.get(bucket)
        return until is not None and self.clock() < until

    def refused(self, bucket: str, exc: PublishRefused) -> None:
        """The broker refused ``bucket``'s publish: hold it back, say so."""
        wait = self._wait.get(bucket, FIRST_WAIT)
        self._until[bucket] = self.clock() + wait
        self._wait[bucket] = min(LONGEST_WAIT, wait * 2)
        log.warning("%s: %s; other buckets go on, %s is tried again in %.0fs",
                    bucket, exc, bucket, wait)

    def worked(self, bucket: str) -> None:
        """A fill of ``bucket`` went through: no longer held."""
        if self._wait.pop(bucket, None) is not None:
            self._until.pop(bucket, None)
            log.info("%s: the broker accepts its publishes again", bucket)
