"""The dead-letter sweep: a dead copy of a live job never waits for its lease.

The broker dead-letters a copy returned ``RECUR_MAX_DELIVERIES`` times. An
outage does that to copies no worker ever ran to its end: prefetched by
workers that were killed, or held on connections that dropped. Their rows
would stay dispatched until the 30-minute lease ran out. Each scheduler pass
(at most every ``SWEEP_EVERY`` seconds per bucket, and only when a ``.dead``
queue changed or holds copies of live jobs) reads the bucket's ``.dead`` queue
and judges every copy from its row (scheduler/dead_verdict.py): a copy that
never ran makes its job due now and leaves the queue; a stale copy of a live
job leaves it; a copy whose last delivery killed its worker dead-letters its
job (the job's plain dead letter joins it, replayable); failures of jobs that
ended stay. Copies it keeps go back to the queue when its channel closes.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from config.buckets import Bucket
from routing.broker import broker_errors, close_channel
from routing.deadletter import reason_of
from scheduler.calls import utcnow
from scheduler.dead_verdict import DROPPED_UNRUN, REMOVED, Verdict, verdict
from scheduler.metrics import DEAD_COPIES
from scheduler.publisher import ConfirmingPublisher
from scheduler.set_aside import Caught
from scheduler.store import DueStore
from scheduler.store.dead import DeadCopies
from scheduler.wire import Dispatch, dispatch_in

log = logging.getLogger("recur.scheduler")

#: Seconds between two reads of one bucket's ``.dead`` queue: a never-run copy is
#: dispatched again within about this.
SWEEP_EVERY = 2.0
#: Copies one read judges at most (the rest wait for the next read).
SCAN_LIMIT = 1000


@dataclass
class Seen:
    """What the last read of one ``.dead`` queue left there."""

    left: int = 0
    #: Of those, copies of live jobs (read again until their job moves on).
    watching: int = 0
    next_at: float = 0.0
    #: The queue held more than one read judges (warned once).
    full: bool = False


@dataclass
class DeadSweep:
    """Judges the copies in every bucket's ``.dead`` queue (one scheduler's)."""

    store: DueStore
    publisher: ConfirmingPublisher
    buckets: Sequence[Bucket]
    max_deliveries: int
    _seen: dict[str, Seen] = field(default_factory=dict)

    def run(self) -> int:
        """Read the ``.dead`` queues that need it; returns the copies removed."""
        removed = 0
        for bucket in self.buckets:
            seen = self._seen.setdefault(bucket.name, Seen())
            clock = time.monotonic()
            if clock < seen.next_at:
                continue
            seen.next_at = clock + SWEEP_EVERY  # one depth read per interval, not per pass
            depth = self.publisher.depth(bucket.dead_queue)
            if depth == 0 or (depth == seen.left and not seen.watching):
                seen.left, seen.watching = (0, 0) if depth == 0 else (depth, 0)
                continue
            counts = self.sweep(bucket)
            self._warn_if_full(bucket, seen, depth)
            seen.left = counts[Verdict.KEEP] + counts[Verdict.WATCH]
            seen.watching = counts[Verdict.WATCH]
            removed += sum(counts[v] for v in REMOVED)
        return removed

    def sweep(self, bucket: Bucket) -> Counter[Verdict]:
        """Judge up to SCAN_LIMIT copies of ``bucket``'s ``.dead`` queue."""
        channel = self.publisher.channel()
        try:
            with broker_errors(f"broker: cannot read {bucket.dead_queue}"):
                counts = self._judge(channel, bucket)
        finally:
            close_channel(channel)  # the copies not acknowledged go back, in order
        self._report(bucket, counts)
        return counts

    def _judge(self, channel: Any, bucket: Bucket) -> Counter[Verdict]:
        """Read the copies and act on each one's verdict; a removed one is acknowledged."""
        copies = self._read(channel, bucket.dead_queue)
        rows = DeadCopies(self.store).rows({c.job_key for _, _, c in copies if c})
        counts: Counter[Verdict] = Counter()
        dropped: Counter[str] = Counter()  # copies the queue's own policy dropped unrun
        for raw, reason, copy in copies:
            judged = verdict(reason, copy, rows.get(copy.job_key) if copy else None)
            judged = self._act(judged, copy, bucket)
            if judged in REMOVED:
                channel.basic_ack(raw.delivery_tag)
            counts[judged] += 1
            dropped[reason] += judged is Verdict.REDISPATCH and reason in DROPPED_UNRUN
        if +dropped:
            log.warning("%s: the broker dropped %d copies before any worker took them (%s: "
                        "a message-ttl or max-length policy on the queue? a bucket queue must "
                        "keep every message); their jobs are dispatched again", bucket.queue,
                        sum(dropped.values()), ", ".join(sorted(+dropped)))
        return counts

    @staticmethod
    def _warn_if_full(bucket: Bucket, seen: Seen, depth: int) -> None:
        full = depth > SCAN_LIMIT
        if full and not seen.full:
            log.warning("%s holds %d copies: the dead-letter sweep judges the first %d only, "
                        "so newer copies of live jobs behind them wait for their lease; "
                        "inspect, replay or purge it (recur dead ...)", bucket.dead_queue,
                        depth, SCAN_LIMIT)
        seen.full = full

    @staticmethod
    def _read(channel: Any, queue: str) -> list[tuple[Any, str, Dispatch | None]]:
        copies = []
        for _ in range(SCAN_LIMIT):
            raw = channel.basic_get(queue, no_ack=False)
            if raw is None:
                break
            headers = dict(raw.headers or {})
            copies.append((raw, reason_of(headers)[0], dispatch_in(headers)))
        return copies

    def _act(self, judged: Verdict, copy: Dispatch | None, bucket: Bucket) -> Verdict:
        """Write what the verdict needs; a row that moved on meanwhile is watched."""
        dead = DeadCopies(self.store)
        if judged is Verdict.REDISPATCH and copy is not None:
            if dead.dispatch_again(copy, utcnow()) is None:
                return Verdict.WATCH
        elif judged is Verdict.BURY and copy is not None:
            reason = (f"delivery limit: delivered {self.max_deliveries} times, its last "
                      f"run never finished")
            caught = Caught(self.publisher.publish_dead)
            if dead.bury(copy, reason, caught) is None:
                return Verdict.WATCH
            if caught.report():  # its dead letter cannot be built: the row is set aside
                return judged
            log.warning("job %s: its last delivery died too (%s): dead-lettered to %s",
                        copy.job_key, reason, bucket.dead_queue)
        return judged

    @staticmethod
    def _report(bucket: Bucket, counts: Counter[Verdict]) -> None:
        for judged, n in counts.items():
            DEAD_COPIES.labels(bucket.name, judged.value).inc(n)
        what = {Verdict.REDISPATCH: "copies that never ran (their jobs dispatched again)",
                Verdict.DROP: "stale copies of live jobs removed"}
        done = [f"{counts[v]} {text}" for v, text in what.items() if counts[v]]
        if done:
            log.info("%s: %s", bucket.dead_queue, ", ".join(done))
