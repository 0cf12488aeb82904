"""Riding out a service outage in place, instead of failing the message.

A task that cannot reach the due-jobs store for a few seconds has done
nothing wrong: rejecting its message spends one of its deliveries (a quorum
queue redelivers at once and dead-letters after ``max_deliveries``), so a
blip of the database would dead-letter every message in flight. Instead the
store call is retried with a short doubling backoff for a bounded time; only
when that budget is spent does the caller hand the message back. The
scheduler process rides out an outage of its own connections the same way,
with :class:`Backoff` between its reconnect attempts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from config.buckets_in_use import bucket_table
from config.errors import ServiceUnavailable
from config.settings import Settings

log = logging.getLogger("recur.outages")

T = TypeVar("T")

#: First wait between two tries, and the longest: a service back is seen within this.
FIRST_WAIT = 0.1
LONGEST_WAIT = 1.0


def budget_for(cfg: Settings, queue: str | None) -> float:
    """Seconds a task from bucket queue ``queue`` may wait: RECUR_OUTAGE_BUDGET, at most
    half the bucket's soft time limit (the wait happens inside the task's time)."""
    known = bucket_table().by_queue.get(queue or "")
    return cfg.outage_budget if known is None else min(cfg.outage_budget,
                                                       known.soft_time_limit / 2)


def ride_out(what: str, call: Callable[[], T], budget: float,
             sleep: Callable[[float], None] = time.sleep) -> T:
    """``call()``, retried while it raises :class:`ServiceUnavailable`, for up to
    ``budget`` seconds; the last error is raised when the budget is spent."""
    deadline = time.monotonic() + budget
    wait, tries = FIRST_WAIT, 0
    while True:
        try:
            result = call()
        except ServiceUnavailable as exc:
            tries += 1
            left = deadline - time.monotonic()
            if left <= 0:
                log.warning("%s: still failing after %d tries (%.0fs budget): %s",
                            what, tries, budget, exc)
                raise
            if tries == 1:
                log.warning("%s: %s; retrying for up to %.0fs", what, exc, budget)
            sleep(min(wait, left))
            wait = min(LONGEST_WAIT, wait * 2)
            continue
        if tries:
            log.info("%s: succeeded after %d failed tries", what, tries)
        return result


#: Longest wait between two reconnect attempts: a service back after an outage is
#: seen within this (and every connection is renewed at once), so the drain
#: resumes within about two seconds of it.
MAX_BACKOFF = 2.0


@dataclass
class Backoff:
    """Doubling waits between reconnect attempts, reset by any step that worked."""

    first: float = 0.25
    current: float = 0.0

    def next(self) -> float:
        self.current = min(MAX_BACKOFF, self.current * 2 if self.current else self.first)
        return self.current

    def reset(self) -> None:
        self.current = 0.0
