"""The statements of ``recur status``'s bounded readings (``estimates.py``), each named
once: index probes that stop at a row count, and PostgreSQL's own estimates.

None reads more than its cap of rows, whatever the population: the head probes and
the minute probes walk the two (bucket, due_at) indexes of scheduled rows (the drain
index ``ix_due_jobs_scheduled`` and ``ix_due_jobs_dealt_due``) from a point, the
in-flight count the lease index (``state = 1``),
the set-aside count the reasons table; the totals beyond the cap are the planner's
row estimate. The exact counts (one scan) stay in ``queries.bucket_stats``.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, and_, bindparam, case, func, select, text, true, type_coerce

from scheduler.store import text_queries
from scheduler.store.schema import (
    DEALT,
    DISPATCHED,
    SCHEDULED,
    SET_ASIDE,
    UNDEALT,
    UtcDateTime,
    due_jobs,
    due_set_aside,
)

_NOW = bindparam("now", type_=UtcDateTime())


def _count_if(cond: Any) -> Any:
    return func.coalesce(func.sum(case((cond, 1), else_=0)), 0)


# head_probe: the bucket's first ``cap`` scheduled rows in due order, in each of the two
# (bucket, due_at) indexes that hold them (ix_due_jobs_scheduled, and
# ix_due_jobs_dealt_due for rows fair share dealt back, migration 0007), each read from
# its low end: how many (all of them when fewer than the cap), how many are due (all
# the due ones when fewer than the cap: they come first) and the oldest.
def _head(dealt: bool) -> Any:
    turn = due_jobs.c.turn != 0 if dealt else due_jobs.c.turn == 0
    first = (select(due_jobs.c.due_at)
             .where(due_jobs.c.bucket == bindparam("bucket"), due_jobs.c.state == SCHEDULED,
                    turn)
             .order_by(due_jobs.c.due_at).limit(bindparam("cap")).subquery())
    return select(func.count().label("n"), _count_if(first.c.due_at <= _NOW).label("due"),
                  type_coerce(func.min(first.c.due_at), UtcDateTime()).label("oldest")
                  ).subquery()


_UNDEALT_HEAD, _DEALT_HEAD = _head(False), _head(True)
HEAD_PROBE: Select[Any] = select(_UNDEALT_HEAD, _DEALT_HEAD).select_from(
    _UNDEALT_HEAD.join(_DEALT_HEAD, true()))

# in_flight: dispatched rows and those whose lease ran out, per bucket, through the
# lease index (as many as the watermarks let be in flight: thousands).
IN_FLIGHT: Select[Any] = (select(due_jobs.c.bucket, func.count(),
                                 _count_if(due_jobs.c.due_at < _NOW))
                          .where(due_jobs.c.state == DISPATCHED).group_by(due_jobs.c.bucket))

# set_aside_capped: set-aside rows per bucket, through their reasons, at most ``cap``.
_ASIDE = (select(due_jobs.c.bucket)
          .select_from(due_set_aside.join(due_jobs, and_(
              due_jobs.c.job_key == due_set_aside.c.job_key, due_jobs.c.state == SET_ASIDE)))
          .limit(bindparam("cap")).subquery())
SET_ASIDE_CAPPED: Select[Any] = select(_ASIDE.c.bucket, func.count()).group_by(_ASIDE.c.bucket)

# -- PostgreSQL only ----------------------------------------------------------------
#: estimate_scheduled: the planner's row estimate for the bucket's scheduled rows: the
#: table's statistics (last ANALYZE: the bucket's and the state's share of the rows)
#: scaled by the table's current size. Planned, never run.
ESTIMATE_SCHEDULED = text(
    "EXPLAIN (FORMAT JSON) SELECT 1 FROM due_jobs WHERE bucket = :bucket AND state = 0")

#: table_statistics: whether due_jobs has statistics on its bucket column (ANALYZE ran
#: on it) and when it was last analyzed.
TABLE_STATISTICS = text(text_queries.TABLE_STATISTICS)

#: window_probes: per window of ``width`` seconds from ``t0`` (``windows`` of them), the
#: bucket's first ``cap`` scheduled rows due in it (a range of each (bucket, due_at)
#: index): how many and the last one's due time.
_WINDOW = ("SELECT due_at FROM due_jobs WHERE bucket = :bucket AND {where}"
           " AND due_at >= :t0 + m.i * :width * interval '1 second'"
           " AND due_at < :t0 + (m.i + 1) * :width * interval '1 second'"
           " ORDER BY due_at LIMIT :cap")
WINDOW_PROBES = text(
    "SELECT m.i, p.n, p.last FROM generate_series(0, :windows - 1) AS m(i)"
    " CROSS JOIN LATERAL (SELECT count(*) AS n, max(r.due_at) AS last FROM ("
    " SELECT due_at FROM ((" + _WINDOW.format(where=UNDEALT) + ") UNION ALL ("
    + _WINDOW.format(where=DEALT) + ")) u ORDER BY due_at LIMIT :cap) r) p"
    " ORDER BY m.i"
).bindparams(bindparam("t0", type_=UtcDateTime()))
