"""What ``recur status`` reads: the store, the broker and Redis, each asked even when
another failed, so the report holds what could be read and one line per service that
could not. Reading never creates anything: no database file, no queue."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from config.buckets_in_use import bucket_table
from config.errors import RecurError, one_line
from config.settings import Settings
from routing.broker import QueueStats, inspect_queues
from routing.queues import missing_queues_line
from scheduler.status import table as st
from scheduler.status.fair import fair_share_state
from scheduler.status.source import StatusSource, open_source
from scheduler.store.status_readings import MINUTES_AHEAD


@dataclass
class Report:
    """What ``recur status`` found, and what it could not read."""

    buckets: list[st.BucketStatus] = field(default_factory=list)
    destinations: list[Any] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Buckets paused by `recur bucket pause`, and since when (None: unknown).
    paused: dict[str, datetime] | None = None
    #: Per bucket, scheduled rows due in each of the next minutes (jitter's histogram).
    due_histogram: dict[str, list[int]] | None = None
    #: Per bucket, @rate_limit's jobs deferred (ever) and waiting for their slot now.
    rate_limited: dict[str, dict[str, int]] | None = None
    #: Whether every store figure is an exact count (``--exact``, or few rows).
    exact: bool = True
    #: When PostgreSQL last analyzed the table its estimates come from.
    analyzed_at: datetime | None = None
    #: Per bucket, the minutes of ``due_histogram`` that are estimates.
    due_histogram_estimated: dict[str, list[int]] = field(default_factory=dict)
    #: Seconds the store's readings took.
    store_seconds: float | None = None
    #: Per bucket, the fair share: users at the head, rows dealt into rounds.
    fair_share: dict[str, dict[str, Any]] | None = None


def utcnow() -> datetime:
    return datetime.now(UTC)


def _failure(exc: Exception) -> str:
    line = one_line(exc)
    if line is None:
        raise exc
    return line


def read_queues(cfg: Settings, report: Report) -> dict[str, QueueStats | None]:
    names = [n for b in bucket_table().buckets for n in (b.queue, b.dead_queue)]
    try:
        found = inspect_queues(cfg.broker_url, names)
    except RecurError as exc:
        report.failures.append(_failure(exc))
        return {}
    note = missing_queues_line(found)
    if note:
        report.notes.append(note)
    return found


def read_store(cfg: Settings, report: Report,
               queues: dict[str, QueueStats | None], exact: bool = False) -> None:
    def depth(name: str) -> int | None:
        stats = queues.get(name)
        return None if stats is None else stats.messages

    depths = {b.queue: depth(b.queue) for b in bucket_table().buckets}
    dead = {b.name: depth(b.dead_queue) for b in bucket_table().buckets}
    try:
        source = open_source(cfg.database_url, exact)
        try:
            started = time.perf_counter()
            found = source.stats(bucket_table().names, utcnow())
            rows = st.collect(found, depths, utcnow())
            report.exact, report.analyzed_at = found.exact, found.analyzed_at
            report.paused = source.paused()
            read_histogram(source, report)
            report.fair_share = fair_share_state(source, cfg, utcnow())
            report.store_seconds = round(time.perf_counter() - started, 4)
        finally:
            source.close()
    except Exception as exc:
        report.failures.append(_failure(exc))
        rows = [st.BucketStatus(b.name, None, None, None, None, None, None, None,
                                depths[b.queue]) for b in bucket_table().buckets]
    report.buckets = [st.with_dead_queue(r, dead.get(r.bucket)) for r in rows]


def read_histogram(source: StatusSource, report: Report) -> None:
    """The due-time histogram: every row of the window (``--exact``), or at most
    250 per bucket and minute, the rest estimated (scheduler/store/estimates.py)."""
    found = source.histogram(bucket_table().names, utcnow(), MINUTES_AHEAD)
    report.due_histogram, report.due_histogram_estimated = found.counts, found.estimated


def read_destinations(cfg: Settings, report: Report) -> None:
    from routing.rate_counters import counters
    from routing.redis_client import get_redis
    from routing.reseq.status_reading import Reading

    try:
        reading = Reading(get_redis(), cfg.key_prefix)  # a key another program wrote: named
        report.destinations = [reading.status(name) for name in reading.destinations()]
        report.failures.extend(reading.unreadable)
        report.rate_limited = counters(get_redis(), cfg.key_prefix)
    except Exception as exc:
        report.failures.append(_failure(exc))


def collect(cfg: Settings, exact: bool = False) -> Report:
    report = Report()
    queues = read_queues(cfg, report)
    read_store(cfg, report, queues, exact)
    read_destinations(cfg, report)
    return report
