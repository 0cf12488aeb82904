"""One bad row never costs a bucket anything: the scheduler's side of setting rows aside.

A row whose message the broker cannot take is set aside by the dispatch that
claimed it (scheduler/store/core.py), in the same transaction that marks the rest
of its batch dispatched: it costs no reconnect, no retry loop, and is never
claimed again. :class:`Caught` keeps what a publish refused, to report it
(a WARNING naming the rows, ``recur_scheduler_set_aside_total``) once the
store committed it. :class:`UnknownBuckets` finds due rows of buckets that
are not in this scheduler's bucket table, which no claim would ever see,
and sets them aside after ``RECUR_UNKNOWN_BUCKET_GRACE``.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from scheduler.metrics import SET_ASIDE
from scheduler.refusals import UNKNOWN_BUCKET, Published, Refusal, unknown_bucket_reason
from scheduler.store import Claimed, refused_rows
from scheduler.store.aside import AsideRows

log = logging.getLogger("recur.scheduler")

#: Seconds between two looks for rows of unknown buckets (one index probe per bucket).
UNKNOWN_EVERY = 5.0
#: Rows of one unknown bucket set aside per transaction, and transactions per look.
ASIDE_BATCH = 1000
ASIDE_ROUNDS = 10


class Caught:
    """A publish function whose refusals are kept, to report after the store committed."""

    def __init__(self, publish: Callable[..., Published | None]) -> None:
        self._publish = publish
        self.refused: list[tuple[Claimed, Refusal]] = []

    def __call__(self, rows: list[Claimed], *args: Any) -> Published | None:
        outcome = self._publish(rows, *args)
        self.refused += refused_rows(rows, outcome)
        return outcome

    def report(self) -> int:
        """Log and count what was set aside; returns how many rows."""
        report(self.refused)
        return len(self.refused)


def report(refused: list[tuple[Claimed, Refusal]]) -> None:
    """A WARNING per bucket naming the first row and its reason, and the metric."""
    by_bucket: dict[str, list[tuple[Claimed, Refusal]]] = defaultdict(list)
    for row, refusal in refused:
        by_bucket[row.bucket].append((row, refusal))
        SET_ASIDE.labels(row.bucket, refusal.kind).inc()
    for bucket, rows in sorted(by_bucket.items()):
        row, refusal = rows[0]
        log.warning("%s: set aside %d job(s) the broker cannot take, e.g. job %s: %s; the rest "
                    "of the batch went on. `recur dead list %s` shows them, `recur dead replay "
                    "--store` dispatches them again, `recur jobs cancel KEY` drops one",
                    bucket, len(rows), shown(row.job_key), refusal.reason, bucket)


def shown(key: str, most: int = 80) -> str:
    """A job key for a log line: quoted, at most ``most`` characters of it."""
    return repr(key) if len(key) <= most else f"{key[:most]!r}... ({len(key)} characters)"


@dataclass
class UnknownBuckets:
    """Sets aside due rows of buckets this scheduler's bucket table does not have."""

    rows: AsideRows
    known: Collection[str]
    grace: float
    _next_at: float = 0.0
    _warned: set[str] = field(default_factory=set)

    def run(self, now: datetime) -> int:
        """Look (at most every UNKNOWN_EVERY seconds); returns the rows set aside."""
        clock = time.monotonic()
        if clock < self._next_at:
            return 0
        self._next_at = clock + UNKNOWN_EVERY
        unknown = [b for b in self.rows.scheduled_buckets() if b not in self.known]
        moved = sum(self._set_aside(bucket, now) for bucket in unknown)
        self.rows.sweep_reasons()
        return moved

    def _set_aside(self, bucket: str, now: datetime) -> int:
        if bucket not in self._warned:
            self._warned.add(bucket)
            log.warning("rows of bucket %r are in the store, but the bucket is not in this "
                        "scheduler's bucket table (%s): set aside once due for %.0fs "
                        "(RECUR_UNKNOWN_BUCKET_GRACE)", bucket, ", ".join(self.known),
                        self.grace)
        reason = unknown_bucket_reason(bucket, self.known)
        before, moved = now - timedelta(seconds=self.grace), 0
        for _ in range(ASIDE_ROUNDS):
            done = self.rows.set_aside_bucket(bucket, before, ASIDE_BATCH, reason, now)
            moved += done
            if done < ASIDE_BATCH:
                break
        if moved:
            SET_ASIDE.labels(bucket, UNKNOWN_BUCKET).inc(moved)
            log.warning("%s: set aside %d due job(s): %s; `recur dead list --store %s` shows "
                        "them", bucket, moved, reason, bucket)
        return moved
