"""The exporter's Prometheus collector: renders the refresher's last snapshot
(system.py), so a scrape costs no service round trip."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from config.buckets_in_use import bucket_table
from tasks.metrics.destinations import DestinationFigures
from tasks.metrics.due_times import histogram_gauge
from tasks.metrics.system import Refresher, Snapshot

#: Every metric the exporter exports (the dashboard test checks panels against it).
EXPORTED = (
    "recur_jobs_scheduled", "recur_jobs_due", "recur_jobs_due_capped", "recur_jobs_dispatched",
    "recur_jobs_lag_seconds", "recur_jobs_leases_recovered_total",
    "recur_jobs_dead_lettered_total", "recur_queue_messages", "recur_queue_consumers",
    "recur_dead_letter_messages", "recur_lock_stats_total", "recur_lock_waiting_users",
    "recur_resequencer_buffered", "recur_resequencer_in_flight",
    "recur_resequencer_sent_total", "recur_resequencer_skipped_total",
    "recur_resequencer_dead_lettered_total", "recur_destination_outage",
    "recur_destination_refusals_total", "recur_destination_rate_waits_total",
    "recur_resequencer_destinations", "recur_exporter_up",
    "recur_exporter_age_seconds",
    "recur_exporter_read_seconds", "recur_jobs_due_histogram",
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
            if total is not None or "totals" in snap.read_at:  # counted: none waits
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
        yield histogram_gauge(snap.due_histogram)

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
    waits = CounterMetricFamily("recur_destination_rate_waits", "Sends that waited for their "
                                "slot under the destination's rate (RECUR_DESTINATIONS "
                                "rate=).", labels=["destination"])
    for d in figures:
        outage.add_metric([d.destination], d.outage)
        dead.add_metric([d.destination], d.dead_lettered)
        waits.add_metric([d.destination], d.rate_waits)
        for status, count in sorted(d.refused.items()):
            refusals.add_metric([d.destination, status], count)
    yield from (outage, refusals, dead, waits)


def _gauge(name: str, doc: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=["bucket"])
