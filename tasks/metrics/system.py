"""The exporter's system-wide gauges, read in the background, served from memory.

A scrape never touches a service: it renders the figures the refresher thread
read last (``recur_exporter_age_seconds`` says how old they are). The refresher
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
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from config.buckets import bucket_table
from config.errors import RecurError
from config.settings import Settings
from routing.queues import QueueStats, all_queue_names, inspect_queues
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
            if not isinstance(exc, RecurError | OSError) and _driver(exc) is None:
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

        snap.totals = self._open_store().stats(utcnow())

    def _read_redis(self, snap: Snapshot) -> None:
        from routing.resequencer import Resequencer
        from tasks.redis_conn import get_redis

        client = get_redis()
        snap.lock = read_lock_figures(client, self.cfg.key_prefix)
        snap.destinations, snap.destinations_seen = busiest(
            Resequencer(client, self.cfg), self.cfg.metrics_top_destinations)


def _driver(exc: BaseException) -> str | None:
    from config.entry import driver_service

    return driver_service(exc)


#: Every metric the exporter exports (the dashboard test checks panels against it).
EXPORTED = (
    "recur_jobs_scheduled", "recur_jobs_due", "recur_jobs_due_capped", "recur_jobs_dispatched",
    "recur_jobs_lag_seconds", "recur_jobs_leases_recovered_total",
    "recur_jobs_dead_lettered_total", "recur_queue_messages", "recur_queue_consumers",
    "recur_dead_letter_messages", "recur_lock_stats_total", "recur_lock_waiting_users",
    "recur_resequencer_buffered", "recur_resequencer_in_flight",
    "recur_resequencer_sent_total", "recur_resequencer_skipped_total",
    "recur_resequencer_dead_lettered_total", "recur_destination_outage",
    "recur_destination_refusals_total", "recur_resequencer_destinations", "recur_exporter_up",
    "recur_exporter_age_seconds",
    "recur_exporter_read_seconds",
)


class SystemCollector(Collector):
    """Renders the refresher's last snapshot; a scrape costs no service round trip."""

    def __init__(self, refresher: Refresher) -> None:
        self.refresher = refresher

    def collect(self) -> Iterable[Any]:
        snap = self.refresher.snapshot
        now = time.monotonic()
        yield from self._jobs(snap)
        yield from self._queues(snap)
        yield from self._lock(snap)
        yield from self._destinations(snap)
        up = GaugeMetricFamily("recur_exporter_up", "1 when the source's last read worked.",
                               labels=["source"])
        age = GaugeMetricFamily("recur_exporter_age_seconds",
                                "Seconds since the source was last read successfully.",
                                labels=["source"])
        took = GaugeMetricFamily("recur_exporter_read_seconds",
                                 "Seconds the source's last read took.", labels=["source"])
        for source in Refresher.SOURCES:
            if source in snap.up:
                up.add_metric([source], float(snap.up[source]))
            if source in snap.read_at:
                age.add_metric([source], now - snap.read_at[source])
            if source in snap.took:
                took.add_metric([source], snap.took[source])
        yield from (up, age, took)

    def _jobs(self, snap: Snapshot) -> Iterable[Any]:
        from scheduler.calls import utcnow

        scheduled = _gauge("recur_jobs_scheduled", "Jobs waiting in the store (exact; from "
                           "the last full count, see recur_exporter_age_seconds{source="
                           "\"totals\"}).")
        due = _gauge("recur_jobs_due", "Jobs whose time has come, not yet dispatched.")
        capped = _gauge("recur_jobs_due_capped", "1 when recur_jobs_due is a lower bound.")
        dispatched = _gauge("recur_jobs_dispatched", "Jobs published and leased, not settled.")
        lag = _gauge("recur_jobs_lag_seconds", "Age of the oldest due job (0: none is due).")
        recovered = CounterMetricFamily("recur_jobs_leases_recovered",
                                        "Expired leases put back (all schedulers).",
                                        labels=["bucket"])
        dead = CounterMetricFamily("recur_jobs_dead_lettered", "Jobs the schedulers moved to "
                                   "the dead-letter queue (lease expired too often).",
                                   labels=["bucket"])
        now = utcnow()
        for bucket in bucket_table().buckets:
            head, total = snap.heads.get(bucket.name), snap.totals.get(bucket.name)
            if total is not None or snap.totals:
                scheduled.add_metric([bucket.name], total.scheduled if total else 0)
            if head is None:
                continue
            count, is_capped = head.due, head.due_capped
            if is_capped and total is not None and total.due > count:
                count, is_capped = total.due, False
            due.add_metric([bucket.name], count)
            capped.add_metric([bucket.name], float(is_capped))
            dispatched.add_metric([bucket.name], head.dispatched)
            oldest = head.oldest_scheduled_at
            lag.add_metric([bucket.name], max(0.0, (now - oldest).total_seconds())
                           if oldest is not None else 0.0)
            recovered.add_metric([bucket.name], head.recovered)
            dead.add_metric([bucket.name], head.dead_lettered)
        yield from (scheduled, due, capped, dispatched, lag, recovered, dead)

    def _queues(self, snap: Snapshot) -> Iterable[Any]:
        messages = GaugeMetricFamily("recur_queue_messages", "Messages ready in the queue.",
                                     labels=["queue"])
        consumers = GaugeMetricFamily("recur_queue_consumers", "Consumers of the queue.",
                                      labels=["queue"])
        dead = _gauge("recur_dead_letter_messages", "Messages in the bucket's dead-letter queue.")
        dead_of = {b.dead_queue: b.name for b in bucket_table().buckets}
        for name, stats in snap.queues.items():
            if stats is None:
                continue
            messages.add_metric([name], stats.messages)
            consumers.add_metric([name], stats.consumers)
            if name in dead_of:
                dead.add_metric([dead_of[name]], stats.messages)
        yield from (messages, consumers, dead)

    def _lock(self, snap: Snapshot) -> Iterable[Any]:
        if snap.lock is None:
            return
        events = CounterMetricFamily("recur_lock_stats", "Per-user lock events summed over "
                                     "every worker (parked: busy/early, handovers, refused, "
                                     "...).", labels=["event"])
        for event, value in sorted(snap.lock.events.items()):
            events.add_metric([event], value)
        waiting = GaugeMetricFamily("recur_lock_waiting_users",
                                    "Users with parked jobs waiting for a look.",
                                    value=snap.lock.waiting_users)
        yield from (events, waiting)

    def _destinations(self, snap: Snapshot) -> Iterable[Any]:
        label = ["destination"]
        buffered = GaugeMetricFamily("recur_resequencer_buffered",
                                     "Processed messages waiting for an earlier one.",
                                     labels=label)
        in_flight = GaugeMetricFamily("recur_resequencer_in_flight",
                                      "Messages assigned a sequence number, not yet processed.",
                                      labels=label)
        sent = CounterMetricFamily("recur_resequencer_sent", "Messages sent in order.",
                                   labels=label)
        skipped = CounterMetricFamily("recur_resequencer_skipped",
                                      "Sequence numbers skipped (gap timeout).", labels=label)
        for d in snap.destinations:
            buffered.add_metric([d.destination], d.buffered)
            in_flight.add_metric([d.destination], d.in_flight)
            sent.add_metric([d.destination], d.sent)
            skipped.add_metric([d.destination], d.skipped)
        seen = GaugeMetricFamily("recur_resequencer_destinations",
                                 "Destinations the resequencer has seen.",
                                 value=snap.destinations_seen)
        yield from (buffered, in_flight, sent, skipped, seen)
        yield from destination_refusals(snap.destinations)


def destination_refusals(figures: list[DestinationFigures]) -> Iterable[Any]:
    """Outages, refusals and dead letters of the exported destinations."""
    outage = GaugeMetricFamily("recur_destination_outage", "1 while the destination is in "
                               "outage (401, 404, a redirect, 5xx after every retry): its "
                               "sender holds its place and retries (_other: how many of the "
                               "rest are).", labels=["destination"])
    refusals = CounterMetricFamily("recur_destination_refusals", "Tries the destination "
                                   "refused or held back, by HTTP status.",
                                   labels=["destination", "status"])
    dead = CounterMetricFamily("recur_resequencer_dead_lettered", "Messages set aside in the "
                               "destination's dead letter (refused, or their step failed).",
                               labels=["destination"])
    for d in figures:
        outage.add_metric([d.destination], d.outage)
        dead.add_metric([d.destination], d.dead_lettered)
        for status, count in sorted(d.refused.items()):
            refusals.add_metric([d.destination, status], count)
    yield from (outage, refusals, dead)


def _gauge(name: str, doc: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=["bucket"])
