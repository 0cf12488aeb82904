"""The exporter's system-wide gauges, read in the background, served from memory.

A scrape never touches a service: it renders (collector.py) the figures the refresher
thread read last (``recur_exporter_age_seconds`` says how old they are). The refresher
reads, every RECUR_METRICS_REFRESH seconds:

- the *heads* of every bucket from the store: oldest scheduled row (lag), due
  rows counted through the drain index up to ``DUE_CAP``, rows in flight, the
  lease/dead-letter counters. Each is an index probe or a bounded range, so its
  cost does not grow with the waiting population;
- every recur queue's depth and consumers (passive declares, one connection);
- the lock's counters and waiting users (tasks/metrics/lock_source.py), and the
  busiest resequencer destinations (tasks/metrics/destinations.py).

The exact per-bucket totals (``recur_jobs_scheduled``, and ``recur_jobs_due``
past the cap) need a scan of the waiting rows. That *full count* runs at most
once per ``FULL_EVERY`` refreshes and never takes more than ``DUTY`` of the
exporter's time: after a count that took d seconds the next waits at least
d / DUTY. At 10M rows the totals are minutes old, the heads seconds old.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from config.buckets_in_use import bucket_table
from config.errors import RecurError, driver_service
from config.settings import Settings
from routing.broker import QueueStats, inspect_queues
from routing.queues import all_queue_names
from tasks.metrics.destinations import DestinationFigures, busiest
from tasks.metrics.lock_source import LockFigures, read_lock_figures

log = logging.getLogger("recur.exporter")

#: Due rows counted exactly per refresh; beyond it the full count's figure is used.
DUE_CAP = 100_000
#: A full count at most every this many refreshes...
FULL_EVERY = 4
#: ...and never more than this share of the exporter's time.
DUTY = 0.1


@dataclass
class Snapshot:
    """The last figures read, by source; a source that failed keeps its old figures."""

    heads: dict[str, Any] = field(default_factory=dict)
    totals: dict[str, Any] = field(default_factory=dict)
    queues: dict[str, QueueStats | None] = field(default_factory=dict)
    lock: LockFigures | None = None
    destinations: list[DestinationFigures] = field(default_factory=list)
    destinations_seen: int = 0
    #: Per bucket, scheduled rows due in each of the next minutes (due_times.py).
    due_histogram: dict[str, list[int]] = field(default_factory=dict)
    #: source -> monotonic time of its last good read / its last read's duration.
    read_at: dict[str, float] = field(default_factory=dict)
    took: dict[str, float] = field(default_factory=dict)
    up: dict[str, bool] = field(default_factory=dict)
    refreshed_at: float = 0.0


class Refresher:
    """Reads the sources in a daemon thread; ``snapshot`` is replaced whole, never mutated."""

    SOURCES = ("store", "totals", "broker", "redis")

    def __init__(self, cfg: Settings) -> None:
        self.cfg = cfg
        self.snapshot = Snapshot()
        self.stopping = threading.Event()
        self._next_full = 0.0
        self._refreshes = 0
        self._store: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="recur-exporter", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self._store is not None:
            self._store.close()

    def _run(self) -> None:
        while not self.stopping.is_set():
            self.refresh()
            self.stopping.wait(self.cfg.metrics_refresh)

    def refresh(self) -> Snapshot:
        """Read every source once (the full count only when its turn came)."""
        snap = Snapshot(**{**self.snapshot.__dict__, "read_at": dict(self.snapshot.read_at),
                           "took": dict(self.snapshot.took), "up": dict(self.snapshot.up)})
        self._read("store", snap, lambda: self._read_heads(snap))
        if self._refreshes % FULL_EVERY == 0 and time.monotonic() >= self._next_full:
            self._read("totals", snap, lambda: self._read_totals(snap))
            self._next_full = time.monotonic() + snap.took["totals"] / DUTY
        self._read("broker", snap, lambda: setattr(
            snap, "queues", inspect_queues(self.cfg.broker_url, all_queue_names())))
        self._read("redis", snap, lambda: self._read_redis(snap))
        self._refreshes += 1
        snap.refreshed_at = time.monotonic()
        self.snapshot = snap
        return snap

    def _read(self, source: str, snap: Snapshot, read: Any) -> None:
        t0 = time.monotonic()
        try:
            read()
        except Exception as exc:  # a source that is down must not stop the others
            if not isinstance(exc, RecurError | OSError) and driver_service(exc) is None:
                log.exception("exporter: reading %s failed unexpectedly", source)
            elif snap.up.get(source, True):
                log.warning("exporter: cannot read %s: %s", source, exc)
            snap.up[source] = False
            if source in ("store", "totals") and self._store is not None:
                self._store.close()
                self._store = None
        else:
            snap.up[source] = True
            snap.read_at[source] = time.monotonic()
        snap.took[source] = time.monotonic() - t0

    def _open_store(self) -> Any:
        from scheduler.store import DueStore

        if self._store is None:
            self._store = DueStore.open(self.cfg.database_url)
        return self._store

    def _read_heads(self, snap: Snapshot) -> None:
        from scheduler.calls import utcnow

        names = [b.name for b in bucket_table().buckets]
        snap.heads = self._open_store().heads(names, utcnow(), DUE_CAP)

    def _read_totals(self, snap: Snapshot) -> None:
        from scheduler.calls import utcnow
        from scheduler.store.due_histogram import MINUTES_AHEAD, due_histogram

        snap.totals = self._open_store().stats(utcnow())
        snap.due_histogram = due_histogram(self._open_store(), bucket_table().names, utcnow(),
                                           MINUTES_AHEAD)

    def _read_redis(self, snap: Snapshot) -> None:
        from routing.redis_client import get_redis
        from routing.reseq.state import Resequencer

        client = get_redis()
        snap.lock = read_lock_figures(client, self.cfg.key_prefix)
        snap.destinations, snap.destinations_seen = busiest(
            Resequencer(client, self.cfg), self.cfg.metrics_top_destinations)
