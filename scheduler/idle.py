"""How long the scheduler sleeps after a pass that moved nothing.

A pass of an idle deployment costs a few milliseconds of CPU (a dozen round trips to
the store and the broker); every ``RECUR_SCHEDULER_INTERVAL`` (0.2 s) that was most of
an idle deployment's cost. So while the deployment stays idle the sleep doubles, up to
``RECUR_SCHEDULER_IDLE_INTERVAL``, and never past the next moment a row the store holds
needs the scheduler (scheduler/store/next_wake.py): a row due at T is still dispatched
at T plus at most one short interval. The idle interval is kept below half
``RECUR_SCHEDULE_THRESHOLD``: an ``apply_async`` written while the scheduler sleeps is
due at least that far ahead, so a pass sees it before it falls due. What only a pass
sees (a job an operator moved to now, a resumed bucket, a freshly written job that idle
pull-forward may run early) waits at most the idle interval.

Not idle: a pass that moved rows, or found a queue at its low watermark (workers are
draining it; they must not run dry while the scheduler sleeps): both go back to the
short interval. While idle, a pass first asks the store whether any row could be claimed
at all, and skips the buckets' fills (most of a pass's cost) when none could; the lease,
dead-letter and periodic steps run on every pass as before.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime

from config.settings import Settings
from scheduler.calls import utcnow
from scheduler.store.base import StoreCore
from scheduler.store.next_wake import claimable, next_wake

#: Never sleep less than this towards a due time (a row due in a microsecond).
MIN_SLEEP = 0.01


@dataclass
class IdleWait:
    """The sleep after each pass, from ``interval`` doubling up to ``idle_interval``."""

    interval: float
    idle_interval: float
    schedule_threshold: float
    buckets: tuple[str, ...] = ()
    _wait: float = 0.0

    @classmethod
    def of(cls, cfg: Settings) -> IdleWait:
        return cls(cfg.scheduler_interval, cfg.scheduler_idle_interval, cfg.schedule_threshold,
                   tuple(cfg.buckets.names))

    @property
    def cap(self) -> float:
        return max(self.interval, min(self.idle_interval, self.schedule_threshold / 2))

    def busy(self) -> None:
        """Rows moved, or a queue was full: back to the short interval."""
        self._wait = 0.0

    def after(self, moved: int, store: StoreCore, pull_forward: Collection[str]) -> float:
        """Seconds to sleep after a pass that moved ``moved`` rows (0: go on at once)."""
        if moved:
            self.busy()
            return 0.0
        early = [b for b in self.buckets if b in pull_forward]
        return self.next(utcnow, lambda now: next_wake(store, self.buckets, early, now))

    def nothing_to_claim(self, store: StoreCore, pull_forward: Collection[str],
                         now: datetime) -> bool:
        """While idle, whether the buckets' fills would claim nothing (one statement
        instead of a dozen round trips per pass); never skipped while not idle."""
        if self._wait <= self.interval:
            return False
        early = [b for b in self.buckets if b in pull_forward]
        return not claimable(store, self.buckets, early, now)

    def next(self, now: Callable[[], datetime],
             next_wake: Callable[[datetime], datetime | None]) -> float:
        """Seconds to sleep after a pass that moved nothing; ``next_wake`` (read only once
        the sleep would be longer than the short interval) bounds it."""
        self._wait = min(self.cap, self._wait * 2) if self._wait else self.interval
        if self._wait <= self.interval:
            return self._wait
        moment = now()
        wake = next_wake(moment)
        if wake is None:
            return self._wait
        return max(MIN_SLEEP, min(self._wait, (wake - moment).total_seconds()))
