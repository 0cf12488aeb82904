"""``recur status``'s bucket table: per bucket, what the store holds and what the broker
holds (scheduler/status/report.py reads the services, output.py prints it)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from datetime import datetime

from config.buckets_in_use import bucket_table
from config.text import visible
from scheduler.store.records import BucketStats
from scheduler.store.status_readings import Readings


@dataclass(frozen=True)
class BucketStatus:
    """One bucket's line of ``recur status`` (None: that service could not be read)."""

    bucket: str
    scheduled: int | None
    due_now: int | None
    lag_seconds: float | None
    dispatched: int | None
    expired_leases: int | None
    leases_recovered: int | None
    #: Poison jobs the scheduler moved to the dead-letter queue (store counter).
    dead_lettered: int | None
    queue_depth: int | None
    #: Messages in the bucket's dead-letter queue now, whoever put them there.
    dead_queue: int | None = None
    #: Rows the scheduler set aside in the store (recur dead list BUCKET shows them).
    set_aside: int | None = None
    #: Fields that are PostgreSQL's estimates (shown ``~1.2M``; ``--exact`` counts them).
    estimated: tuple[str, ...] = ()
    #: Fields whose count stopped at a cap: at least that many (shown ``≥5000``).
    at_least: tuple[str, ...] = ()


def with_dead_queue(row: BucketStatus, depth: int | None) -> BucketStatus:
    return replace(row, dead_queue=depth)


def bucket_status(stats: BucketStats | None, bucket: str, now: datetime,
                  depth: int | None) -> BucketStatus:
    if stats is None:
        return BucketStatus(bucket, 0, 0, 0.0, 0, 0, 0, 0, depth, set_aside=0)
    lag = (now - stats.oldest_due_at).total_seconds() if stats.oldest_due_at else 0.0
    return BucketStatus(bucket, stats.scheduled, stats.due, max(lag, 0.0), stats.dispatched,
                        stats.expired, stats.recovered, stats.dead_lettered, depth,
                        set_aside=stats.set_aside, estimated=_named(stats.estimated),
                        at_least=_named(stats.at_least))


def _named(fields: tuple[str, ...]) -> tuple[str, ...]:
    return tuple("due_now" if f == "due" else f for f in fields)


def collect(found: Readings, depths: dict[str, int | None], now: datetime
            ) -> list[BucketStatus]:
    """Status of every bucket of the bucket table, then of every bucket that is not in
    it but still has rows in the store (no scheduler dispatches them: they are set
    aside once due, RECUR_UNKNOWN_BUCKET_GRACE). ``found``: the store's readings
    (scheduler/status/source.py)."""
    stats = found.buckets
    table = bucket_table()
    names = table.names
    rows = [bucket_status(stats.get(b.name), b.name, now, depths.get(b.queue))
            for b in table.buckets]
    return rows + [bucket_status(s, name, now, None) for name, s in sorted(stats.items())
                   if name not in names and (s.scheduled or s.dispatched or s.set_aside)]


def as_json(rows: list[BucketStatus]) -> str:
    return json.dumps({"buckets": [asdict(r) for r in rows]})


HEADER = (f"{'bucket':<8}{'scheduled':>11}{'due now':>9}{'lag s':>9}{'dispatched':>12}"
          f"{'expired':>9}{'recovered':>11}{'dead':>7}{'queue':>8}{'aside':>7}")


def _cell(value: float | None, width: int, digits: int = 0) -> str:
    text = "?" if value is None else f"{value:.{digits}f}" if digits else str(value)
    return f"{text:>{width}}"


def approx(n: int) -> str:
    """An estimate as an operator reads it: ``~9876``, ``~412k``, ``~1.2M``."""
    if n < 10_000:
        return f"~{n}"
    return f"~{n / 1000:.0f}k" if n < 1_000_000 else f"~{n / 1e6:.1f}M"


def _count(row: BucketStatus, name: str, width: int) -> str:
    value = getattr(row, name)
    if value is not None and name in row.at_least:
        return f"{'≥' + str(value):>{width}}"
    if value is not None and name in row.estimated:
        return f"{approx(value):>{width}}"
    return _cell(value, width)


def as_table(rows: list[BucketStatus]) -> str:
    """The table; ``dead`` is the dead-letter queue's depth, ``aside`` the rows set aside
    in the store, ``?`` what could not be read, ``~`` an estimate, ``≥`` a capped count."""
    lines = [HEADER]
    for r in rows:
        lines.append(f"{visible(r.bucket):<8}{_count(r, 'scheduled', 11)}{_count(r, 'due_now', 9)}"
                     f"{_cell(r.lag_seconds, 9, 1)}{_cell(r.dispatched, 12)}"
                     f"{_cell(r.expired_leases, 9)}{_cell(r.leases_recovered, 11)}"
                     f"{_cell(r.dead_queue, 7)}{_cell(r.queue_depth, 8)}"
                     f"{_count(r, 'set_aside', 7)}")
    return "\n".join(lines)
