"""The scheduler's INFO line: one summary per RECUR_STATUS_INTERVAL, not one per pass.

Per-pass lines are DEBUG; an idle scheduler passes five times a second, and a
line per pass buried what an operator needs. The summary says, per bucket,
what was dispatched (due / pulled forward) and recovered since the last line,
and the oldest due job's lag the last pass saw.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from scheduler import metrics

log = logging.getLogger("recur.scheduler")


@dataclass
class Summary:
    """What happened since the last INFO line (counted into the Prometheus counters too)."""

    interval: float
    due: Counter[str] = field(default_factory=Counter)
    early: Counter[str] = field(default_factory=Counter)
    recovered: Counter[str] = field(default_factory=Counter)
    dead: Counter[str] = field(default_factory=Counter)
    lag: dict[str, float] = field(default_factory=dict)
    last: float = field(default_factory=time.monotonic)

    def dispatched(self, bucket: str, count: int, *, early: bool) -> None:
        (self.early if early else self.due)[bucket] += count
        metrics.DISPATCHED.labels(bucket, "early" if early else "due").inc(count)

    def leases(self, recovered: dict[str, int], dead: dict[str, int]) -> None:
        for bucket, n in recovered.items():
            self.recovered[bucket] += n
            metrics.LEASES_RECOVERED.labels(bucket).inc(n)
        for bucket, n in dead.items():
            self.dead[bucket] += n
            metrics.DEAD_LETTERED.labels(bucket).inc(n)

    def maybe_log(self, lag_of: Callable[[], dict[str, float]]) -> bool:
        """Log the summary when the interval has passed; True when it did.

        ``lag_of`` reads each bucket's lag (a bounded index probe), only then.
        """
        now = time.monotonic()
        if now - self.last < self.interval:
            return False
        self.lag = lag_of()
        buckets = sorted({*self.due, *self.early, *self.recovered, *self.dead, *self.lag})
        parts = [f"{b}: dispatched {self.due[b]}, pulled forward {self.early[b]}, recovered "
                 f"{self.recovered[b]}, dead-lettered {self.dead[b]}, lag "
                 f"{self.lag.get(b, 0.0):.1f}s" for b in buckets]
        log.info("last %.0fs: %s", now - self.last, "; ".join(parts) or "nothing to do")
        self.due.clear()
        self.early.clear()
        self.recovered.clear()
        self.dead.clear()
        self.last = now
        return True
