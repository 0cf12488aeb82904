"""``recur status``'s bounded readings, written once over ``run(name, params)``.

The same logic runs on two kinds of connection: a SQLAlchemy one (``DueStore``:
estimates.py, fair.py map each name to its statement) and, for the command on
PostgreSQL, a plain psycopg one running status_sql.py's text under the same names
(status_reader.py), so the command imports no SQLAlchemy (~0.4 s of its wall).
This module imports neither. What the readings read and why they are bounded:
estimates.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from scheduler.store.records import DEAD_LETTERED, RECOVERED, BucketStats

#: Runs the statement named ``name`` with ``params``: its rows.
Run = Callable[[str, dict[str, Any]], list[tuple[Any, ...]]]

#: Scheduled rows read per bucket before the totals become estimates. Each costs a
#: heap visit where the visibility map does not cover its page (~2-5 us: 5,000 rows of
#: 3 buckets, 40 ms), an index-only read where it does (~4 ms).
HEAD_CAP = 5_000
#: Rows read per bucket and minute of the due-time histogram before it estimates
#: (10 minutes of 3 buckets: at most 7,500 rows), a quarter from each quarter minute.
MINUTE_CAP = 250
PROBES_PER_MINUTE = 4
#: Most minutes one histogram reading covers (a bound on the statement's width).
MAX_MINUTES = 60
#: Minutes ahead that ``recur status`` and the exporter read (``minute`` label 0 to 9).
MINUTES_AHEAD = 10
#: Counter (due_counters) of rows the schedulers dealt into rounds, per bucket.
DEALT = "fair_dealt"
#: A window from the start of time.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


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


@dataclass(frozen=True)
class Rounds:
    """A bucket's rows dealt into rounds: the lowest round (claimed next) and the highest."""

    lowest: int
    highest: int


@dataclass(frozen=True)
class FairState:
    """A bucket's fair share as ``recur status`` shows it (each figure one bounded read)."""

    bucket: str
    #: Due rows not dealt at the head of the bucket (read at most ``head_cap``).
    head_rows: int
    head_users: int
    #: Rows of the user with the most rows in that head.
    largest_rows: int
    #: Rows dealt now (counted up to a cap: ``dealt_capped``), and their rounds.
    dealt_rows: int
    dealt_capped: bool
    rounds: Rounds | None
    #: Users of the next dealt rows (the first ``head_cap`` in round order).
    dealt_users: int
    oldest_dealt_at: datetime | None
    #: Rows the schedulers ever dealt (``due_counters``' ``fair_dealt``).
    dealt_ever: int


def runner(conn: Any, statements: Mapping[str, Any]) -> Run:
    """``run`` on a SQLAlchemy connection: each name is ``statements[name]``."""
    return lambda name, params: [tuple(r) for r in conn.execute(statements[name], params)]


def _scalar(rows: list[tuple[Any, ...]]) -> Any:
    return rows[0][0] if rows else None


def bounded_stats(run: Run, buckets: Sequence[str], now: datetime, cap: int) -> Readings:
    """Every bucket's counts on PostgreSQL, reading at most ``cap`` rows of each."""
    has_stats, analyzed_at = run("TABLE_STATISTICS", {})[0]
    counters = {(str(b), str(n)): int(v) for b, n, v in run("COUNTER_TOTALS", {})}
    in_flight = {str(b): (int(n), int(late)) for b, n, late in run("IN_FLIGHT", {"now": now})}
    aside = {str(b): int(n) for b, n in run("SET_ASIDE_CAPPED", {"cap": cap})}
    aside_capped = sum(aside.values()) >= cap
    names = set(buckets) | set(in_flight) | set(aside) | {b for b, _ in counters}
    names |= {str(r[0]) for r in run("SCHEDULED_BUCKETS", {})}
    found = {}
    for bucket in sorted(names):
        stats = _head(run, bucket, now, cap, bool(has_stats))
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


def _head(run: Run, bucket: str, now: datetime, cap: int, has_stats: bool) -> BucketStats:
    """The bucket's scheduled and due rows and its oldest due row, from one probe."""
    n0, due0, oldest0, n1, due1, oldest1 = run(
        "HEAD_PROBE", {"bucket": bucket, "now": now, "cap": cap})[0]
    counted, due = int(n0) + int(n1), int(due0) + int(due1)
    oldest = min((t for t in (oldest0, oldest1) if t is not None), default=None)
    oldest_due = oldest if oldest is not None and oldest <= now else None
    at_least: tuple[str, ...] = ("due",) if max(due0, due1) >= cap else ()
    capped = max(n0, n1) >= cap
    scheduled, estimated = counted, ("scheduled",) if capped and has_stats else ()
    if capped and not has_stats:
        at_least += ("scheduled",)
    elif estimated:
        plan: Any = _scalar(run("ESTIMATE_SCHEDULED", {"bucket": bucket}))
        scheduled = max(counted, int(plan[0]["Plan"]["Plan Rows"]))
    return BucketStats(bucket, scheduled, due, oldest_due, 0, 0, 0,
                       estimated=estimated, at_least=at_least)


def bounded_histogram(run: Run, buckets: Sequence[str], now: datetime, minutes: int,
                      cap: int) -> Histogram:
    """Per bucket on PostgreSQL, rows due in [now + i min, now + i + 1 min) for i <
    ``minutes``, reading at most ``cap`` rows per bucket and minute."""
    minutes = max(1, min(minutes, MAX_MINUTES))
    width, per_window = 60 / PROBES_PER_MINUTE, max(1, cap // PROBES_PER_MINUTE)
    counts = {b: [0] * minutes for b in buckets}
    estimated: dict[str, list[int]] = {}
    for bucket in buckets:
        params = {"bucket": bucket, "t0": now, "width": width, "cap": per_window,
                  "windows": minutes * PROBES_PER_MINUTE}
        for i, n, last in run("WINDOW_PROBES", params):
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


def fair_state(run: Run, bucket: str, now: datetime, head_cap: int, cap: int) -> FairState:
    """What ``recur status`` shows of ``bucket``'s fair share (fair.FairRows.state)."""
    params: dict[str, Any] = {"bucket": bucket, "now": now}
    users = Counter(str(u) for _, u, _ in run(
        "FAIR_WINDOW", {**params, "start": EPOCH, "limit": head_cap}))
    dealt = int(_scalar(run("DEALT_CAPPED", {**params, "cap": cap})) or 0)
    oldest = _scalar(run("OLDEST_DEALT", params)) if dealt else None
    low = _scalar(run("LOWEST_ROUND", params)) if dealt else None
    high = _scalar(run("HIGHEST_ROUND", params)) if dealt else None
    next_users = run("DEALT_USERS", {**params, "limit": head_cap}) if dealt else []
    ever = _scalar(run("COUNTER_TOTAL", {"bucket": bucket, "name": DEALT}))
    rounds = None if low is None else Rounds(int(low), int(high or low))
    return FairState(bucket, sum(users.values()), len(users),
                     max(users.values(), default=0), dealt, dealt >= cap, rounds,
                     len(next_users), oldest, int(ever or 0))


def paused(run: Run) -> dict[str, datetime]:
    """Paused buckets and since when (control.JobControl.paused)."""
    return {str(b): at for b, at in run("PAUSED_BUCKETS", {})}
