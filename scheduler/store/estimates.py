"""``recur status``'s readings at any population: bounded index probes and PostgreSQL's
estimates instead of a scan of the table (``readings.stats``, behind ``--exact``).

Per bucket, one probe reads the first ``cap`` scheduled rows in due order from each
index that holds them (the drain index, and the index of rows fair share dealt
back). Fewer than the cap: the scheduled and due counts are exact. At the cap:
the due rows (which come first) are exact while fewer than the cap, else at least
the cap; the scheduled total is the planner's estimate (the table's last ANALYZE,
scaled by its current size), or at least the cap when the table was never analyzed.
The oldest due row is the probe's first. Rows in flight, leases run out and the
counters are exact (bounded by the watermarks, or tiny tables); set-aside rows are
counted up to the cap. SQLite, one machine's store, is counted exactly.

The due-time histogram likewise: per bucket and quarter minute at most ``cap / 4``
rows are read, from the quarter's start; a quarter holding more is estimated from
how soon those rows fall due (their rate, over the quarter): close for rows spread
through it, as jitter spreads them, and off for a burst inside it, which still
stands out (``--exact`` counts it). The totals' estimates are PostgreSQL's, as fresh
as its statistics (autovacuum's autoanalyze keeps them so; the planner scales them
by the table's current size).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection

from scheduler.store import estimate_queries as q
from scheduler.store import readings
from scheduler.store.base import StoreCore
from scheduler.store.due_histogram import MAX_MINUTES, due_histogram
from scheduler.store.operator_queries import SCHEDULED_BUCKETS
from scheduler.store.queries import COUNTER_TOTALS
from scheduler.store.records import DEAD_LETTERED, RECOVERED, BucketStats

#: Scheduled rows read per bucket before the totals become estimates. Each costs a
#: heap visit where the visibility map does not cover its page (~2-5 us: 5,000 rows of
#: 3 buckets, 40 ms), an index-only read where it does (~4 ms).
HEAD_CAP = 5_000
#: Rows read per bucket and minute of the due-time histogram before it estimates
#: (10 minutes of 3 buckets: at most 7,500 rows), a quarter from each quarter minute.
MINUTE_CAP = 250
PROBES_PER_MINUTE = 4


@dataclass(frozen=True)
class Readings:
    """Per-bucket counts, which of them are estimates, and how fresh those are."""

    buckets: dict[str, BucketStats]
    #: Whether every figure is an exact count.
    exact: bool
    #: When PostgreSQL last analyzed due_jobs (None: never, or not PostgreSQL).
    analyzed_at: datetime | None = None


@dataclass(frozen=True)
class Histogram:
    """Per bucket, rows due in each of the next minutes; ``estimated`` the minutes
    whose count is an estimate."""

    counts: dict[str, list[int]]
    estimated: dict[str, list[int]] = field(default_factory=dict)


def bounded_stats(store: StoreCore, buckets: Sequence[str], now: datetime,
                  cap: int = HEAD_CAP) -> Readings:
    """Every bucket's counts, reading at most ``cap`` rows of each (exact on SQLite)."""
    if store.dialect != "postgresql":
        return Readings(readings.stats(store, now), exact=True)
    with store.transaction("read the buckets' heads and estimates") as conn:
        has_stats, analyzed_at = conn.execute(q.TABLE_STATISTICS).one()
        counters = {(str(b), str(n)): int(v) for b, n, v in conn.execute(COUNTER_TOTALS)}
        in_flight = {str(b): (int(n), int(late)) for b, n, late
                     in conn.execute(q.IN_FLIGHT, {"now": now})}
        aside = {str(b): int(n) for b, n in conn.execute(q.SET_ASIDE_CAPPED, {"cap": cap})}
        aside_capped = sum(aside.values()) >= cap
        names = set(buckets) | set(in_flight) | set(aside) | {b for b, _ in counters}
        names |= {str(b) for b in conn.execute(SCHEDULED_BUCKETS).scalars()}
        found = {}
        for bucket in sorted(names):
            stats = _head(conn, bucket, now, cap, bool(has_stats))
            flying, late = in_flight.get(bucket, (0, 0))
            found[bucket] = replace(
                stats, dispatched=flying, expired=late,
                recovered=counters.get((bucket, RECOVERED), 0),
                dead_lettered=counters.get((bucket, DEAD_LETTERED), 0),
                set_aside=aside.get(bucket, 0),
                at_least=stats.at_least + (("set_aside",) if aside_capped
                                           and bucket in aside else ()))
    exact = not any(s.estimated or s.at_least for s in found.values())
    return Readings(found, exact, analyzed_at if has_stats else None)


def _head(conn: Connection, bucket: str, now: datetime, cap: int, has_stats: bool
          ) -> BucketStats:
    """The bucket's scheduled and due rows and its oldest due row, from one probe."""
    n0, due0, oldest0, n1, due1, oldest1 = conn.execute(
        q.HEAD_PROBE, {"bucket": bucket, "now": now, "cap": cap}).one()
    counted, due = int(n0) + int(n1), int(due0) + int(due1)
    oldest = min((t for t in (oldest0, oldest1) if t is not None), default=None)
    oldest_due = oldest if oldest is not None and oldest <= now else None
    at_least: tuple[str, ...] = ("due",) if max(due0, due1) >= cap else ()
    capped = max(n0, n1) >= cap
    scheduled, estimated = counted, ("scheduled",) if capped and has_stats else ()
    if capped and not has_stats:
        at_least += ("scheduled",)
    elif estimated:
        scheduled = max(counted, _planned(conn, q.ESTIMATE_SCHEDULED, {"bucket": bucket}))
    return BucketStats(bucket, scheduled, due, oldest_due, 0, 0, 0,
                       estimated=estimated, at_least=at_least)


def bounded_histogram(store: StoreCore, buckets: Sequence[str], now: datetime, minutes: int,
                      cap: int = MINUTE_CAP) -> Histogram:
    """Per bucket, rows due in [now + i min, now + i + 1 min) for i < ``minutes``, reading
    at most ``cap`` rows per bucket and minute (SQLite: the exact histogram)."""
    if store.dialect != "postgresql":
        return Histogram(due_histogram(store, buckets, now, minutes))
    minutes = max(1, min(minutes, MAX_MINUTES))
    width, per_window = 60 / PROBES_PER_MINUTE, max(1, cap // PROBES_PER_MINUTE)
    counts = {b: [0] * minutes for b in buckets}
    estimated: dict[str, list[int]] = {}
    with store.transaction("probe the due-time histogram") as conn:
        for bucket in buckets:
            params = {"bucket": bucket, "t0": now, "width": width, "cap": per_window,
                      "windows": minutes * PROBES_PER_MINUTE}
            for i, n, last in conn.execute(q.WINDOW_PROBES, params):
                minute = int(i) // PROBES_PER_MINUTE
                if n < per_window:
                    counts[bucket][minute] += int(n)
                    continue
                span = (last - (now + timedelta(seconds=i * width))).total_seconds()
                counts[bucket][minute] += (max(per_window, round(per_window * width / span))
                                           if span > 0 else per_window)
                if minute not in estimated.get(bucket, []):
                    estimated.setdefault(bucket, []).append(minute)
    return Histogram(counts, estimated)


def _planned(conn: Connection, explain: Any, params: dict[str, Any]) -> int:
    """The planner's row estimate for an ``EXPLAIN (FORMAT JSON)`` statement."""
    plan: Any = conn.execute(explain, params).scalar()
    return int(plan[0]["Plan"]["Plan Rows"])
