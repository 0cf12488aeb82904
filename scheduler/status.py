"""``recur status``: per bucket, what the store holds and what the broker holds."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime

from config.buckets import BUCKETS
from scheduler.store import BucketStats, DueStore


@dataclass(frozen=True)
class BucketStatus:
    """One bucket's line of ``recur status``."""

    bucket: str
    scheduled: int
    due_now: int
    lag_seconds: float
    dispatched: int
    expired_leases: int
    leases_recovered: int
    dead_lettered: int
    queue_depth: int | None


def bucket_status(stats: BucketStats | None, bucket: str, now: datetime,
                  depth: int | None) -> BucketStatus:
    if stats is None:
        return BucketStatus(bucket, 0, 0, 0.0, 0, 0, 0, 0, depth)
    lag = (now - stats.oldest_due_at).total_seconds() if stats.oldest_due_at else 0.0
    return BucketStatus(bucket, stats.scheduled, stats.due, max(lag, 0.0), stats.dispatched,
                        stats.expired, stats.recovered, stats.dead_lettered, depth)


def collect(store: DueStore, depths: dict[str, int | None], now: datetime) -> list[BucketStatus]:
    """Status of every bucket of the bucket table."""
    stats = store.stats(now)
    return [bucket_status(stats.get(b.name), b.name, now, depths.get(b.queue)) for b in BUCKETS]


def as_json(rows: list[BucketStatus]) -> str:
    return json.dumps({"buckets": [asdict(r) for r in rows]})


HEADER = (f"{'bucket':<8}{'scheduled':>11}{'due now':>9}{'lag s':>9}{'dispatched':>12}"
          f"{'expired':>9}{'recovered':>11}{'dead':>7}{'queue':>8}")


def as_table(rows: list[BucketStatus]) -> str:
    lines = [HEADER]
    for r in rows:
        depth = "?" if r.queue_depth is None else str(r.queue_depth)
        lines.append(f"{r.bucket:<8}{r.scheduled:>11}{r.due_now:>9}{r.lag_seconds:>9.1f}"
                     f"{r.dispatched:>12}{r.expired_leases:>9}{r.leases_recovered:>11}"
                     f"{r.dead_lettered:>7}{depth:>8}")
    return "\n".join(lines)
