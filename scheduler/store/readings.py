"""What operators and the exporter read of the buckets: ``recur status``'s full counts,
and the cheap, bounded heads the exporter reads often."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from scheduler.store.base import StoreCore
from scheduler.store.fair_queries import DEALT_CAPPED, OLDEST_DEALT
from scheduler.store.queries import (
    COUNTER_TOTALS,
    DISPATCHED_PER_BUCKET,
    DUE_CAPPED,
    OLDEST_SCHEDULED,
    bucket_stats,
)
from scheduler.store.records import DEAD_LETTERED, RECOVERED, BucketHead, BucketStats


def stats(store: StoreCore, now: datetime) -> dict[str, BucketStats]:
    """Per-bucket counts for ``recur status`` (one scan of the table)."""
    rows = bucket_stats(now)
    with store.transaction("read statistics") as conn:
        counters: dict[tuple[str, str], int] = {
            (b, name): int(v) for b, name, v in conn.execute(COUNTER_TOTALS)}
        found = {r[0]: BucketStats(r[0], int(r[1]), int(r[2]), r[3], int(r[4]), int(r[5]),
                                   counters.get((r[0], RECOVERED), 0),
                                   counters.get((r[0], DEAD_LETTERED), 0), int(r[6]))
                 for r in conn.execute(rows)}
    for bucket, _ in counters:
        found.setdefault(bucket, BucketStats(
            bucket, 0, 0, None, 0, 0, counters.get((bucket, RECOVERED), 0),
            counters.get((bucket, DEAD_LETTERED), 0)))
    return found


def heads(store: StoreCore, buckets: Sequence[str], now: datetime, due_cap: int
          ) -> dict[str, BucketHead]:
    """Per bucket what the exporter reads often: each read is bounded, never a full scan.

    Oldest scheduled row: the first entry of the partial drain index, or of the dealt
    rows' (fair share). Due rows: counted through those indexes up to ``due_cap``
    each (rows dealt back are all due). Dispatched rows: the lease index
    (as many as are in flight, bounded by the watermarks). Counters: a tiny table.
    """
    found: dict[str, BucketHead] = {}
    with store.transaction("read the buckets' heads") as conn:
        in_flight = {str(b): int(n) for b, n in conn.execute(DISPATCHED_PER_BUCKET)}
        counters = {(str(b), str(n)): int(v) for b, n, v in conn.execute(COUNTER_TOTALS)}
        for bucket in buckets:
            first = conn.execute(OLDEST_SCHEDULED, {"bucket": bucket}).scalar()
            count = conn.execute(DUE_CAPPED, {"bucket": bucket, "now": now,
                                              "cap": due_cap}).scalar()
            dealt = conn.execute(DEALT_CAPPED, {"bucket": bucket, "cap": due_cap}).scalar()
            if dealt:
                oldest = conn.execute(OLDEST_DEALT, {"bucket": bucket}).scalar()
                first = oldest if first is None else min(first, oldest)
                count = min(int(count or 0) + int(dealt), due_cap)
            found[bucket] = BucketHead(
                bucket, first, int(count or 0), int(count or 0) >= due_cap,
                in_flight.get(bucket, 0), counters.get((bucket, RECOVERED), 0),
                counters.get((bucket, DEAD_LETTERED), 0))
    return found
