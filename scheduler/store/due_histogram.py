"""The due-time histogram: per bucket, how many waiting rows fall due in each of the
next minutes (``recur status``'s jitter line, ``recur_jobs_due_histogram``).

One grouped statement: a range of the drain index (``ix_due_jobs_scheduled``:
bucket, due_at, scheduled rows only; a row fair share dealt back was due when it
was dealt, so none is in the window) from now to now + N minutes, each row
counted into its minute by a ``CASE`` on bound instants (portable: PostgreSQL
and SQLite alike). Its cost is the rows due in the window, not the population.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Select, and_, bindparam, case, func, select

from scheduler.store.base import StoreCore
from scheduler.store.schema import SCHEDULED, UtcDateTime, due_jobs
from scheduler.store.status_readings import MAX_MINUTES, MINUTES_AHEAD

__all__ = ["MAX_MINUTES", "MINUTES_AHEAD", "due_histogram", "histogram_statement"]


def _edge(i: int) -> Any:
    return bindparam(f"t{i}", type_=UtcDateTime())


def histogram_statement(minutes: int) -> Select[Any]:
    """due_histogram: per bucket, the scheduled rows due in each minute from ``t0``."""
    due = due_jobs.c.due_at
    counts = [func.sum(case((and_(due >= _edge(i), due < _edge(i + 1)), 1), else_=0))
              for i in range(minutes)]
    return (select(due_jobs.c.bucket, *counts)
            .where(due_jobs.c.bucket.in_(bindparam("buckets", expanding=True)),
                   due_jobs.c.state == SCHEDULED, due_jobs.c.turn == 0,
                   due >= _edge(0), due < _edge(minutes))
            .group_by(due_jobs.c.bucket))


def due_histogram(store: StoreCore, buckets: Sequence[str], now: datetime, minutes: int
                  ) -> dict[str, list[int]]:
    """Per bucket, rows due in [now + i min, now + i + 1 min) for i < ``minutes``
    (every bucket listed, zeros where none is due)."""
    minutes = max(1, min(minutes, MAX_MINUTES))
    params: dict[str, object] = {f"t{i}": now + timedelta(minutes=i) for i in range(minutes + 1)}
    params["buckets"] = list(buckets)
    found = {b: [0] * minutes for b in buckets}
    if not buckets:
        return found
    with store.transaction("read the due-time histogram") as conn:
        for row in conn.execute(histogram_statement(minutes), params):
            values: tuple[Any, ...] = tuple(row)
            found[str(values[0])] = [int(n or 0) for n in values[1:]]
    return found
