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

The logic is status_readings.py's, over statements by name: here SQLAlchemy's, for
``recur status`` on PostgreSQL the same as text on psycopg alone (status_reader.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from scheduler.store import estimate_queries as q
from scheduler.store import readings
from scheduler.store import status_readings as sr
from scheduler.store.base import StoreCore
from scheduler.store.due_histogram import due_histogram
from scheduler.store.operator_queries import SCHEDULED_BUCKETS
from scheduler.store.queries import COUNTER_TOTALS
from scheduler.store.status_readings import (
    HEAD_CAP,
    MINUTE_CAP,
    PROBES_PER_MINUTE,
    Histogram,
    Readings,
)

__all__ = ["HEAD_CAP", "MINUTE_CAP", "PROBES_PER_MINUTE", "STATEMENTS", "Histogram", "Readings",
           "bounded_histogram", "bounded_stats"]

#: The readings' statements by the names status_readings.py runs them by (the same
#: names' text for psycopg alone: status_sql.py).
STATEMENTS = {"TABLE_STATISTICS": q.TABLE_STATISTICS, "COUNTER_TOTALS": COUNTER_TOTALS,
              "IN_FLIGHT": q.IN_FLIGHT, "SET_ASIDE_CAPPED": q.SET_ASIDE_CAPPED,
              "SCHEDULED_BUCKETS": SCHEDULED_BUCKETS, "HEAD_PROBE": q.HEAD_PROBE,
              "ESTIMATE_SCHEDULED": q.ESTIMATE_SCHEDULED, "WINDOW_PROBES": q.WINDOW_PROBES}


def bounded_stats(store: StoreCore, buckets: Sequence[str], now: datetime,
                  cap: int = HEAD_CAP) -> Readings:
    """Every bucket's counts, reading at most ``cap`` rows of each (exact on SQLite)."""
    if store.dialect != "postgresql":
        return Readings(readings.stats(store, now), exact=True)
    with store.transaction("read the buckets' heads and estimates") as conn:
        return sr.bounded_stats(sr.runner(conn, STATEMENTS), buckets, now, cap)


def bounded_histogram(store: StoreCore, buckets: Sequence[str], now: datetime, minutes: int,
                      cap: int = MINUTE_CAP) -> Histogram:
    """Per bucket, rows due in [now + i min, now + i + 1 min) for i < ``minutes``, reading
    at most ``cap`` rows per bucket and minute (SQLite: the exact histogram)."""
    if store.dialect != "postgresql":
        return Histogram(due_histogram(store, buckets, now, minutes))
    with store.transaction("probe the due-time histogram") as conn:
        return sr.bounded_histogram(sr.runner(conn, STATEMENTS), buckets, now, minutes, cap)
