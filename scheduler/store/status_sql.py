"""``recur status``'s PostgreSQL statements as text, for psycopg alone (no SQLAlchemy).

``recur status`` reads a PostgreSQL store through bounded probes and estimates
(status_readings.py) that take ~30-45 ms at 10M rows; importing SQLAlchemy and
compiling these statements took longer than running them (~0.4 s of wall). So,
as hot_sql.py does for the worker, they are kept here as the text SQLAlchemy
compiles for psycopg from their one source (estimate_queries.py, fair_queries.py,
operator_queries.py, queries.py, bulk_indexes.py), with their fixed parameters'
values; tests/unit/test_status_sql.py holds each equal to its compilation, and
:data:`SECONDARY_INDEXES` equal to ``schema.secondary_indexes()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scheduler.store import text_queries


@dataclass(frozen=True, eq=False)
class ReadSql:
    """One read as psycopg takes it: its text, its fixed parameters' values, and the
    result columns SQLAlchemy reads as ``UtcDateTime`` (handed out in UTC)."""

    name: str
    sql: str
    defaults: dict[str, Any] = field(default_factory=dict)
    utc: tuple[int, ...] = ()


_TS = "TIMESTAMP WITH TIME ZONE"
_BUCKET = "due_jobs.bucket = %(bucket)s::VARCHAR AND due_jobs.state = %(state_1)s::SMALLINT"
_DEALT = f"WHERE {_BUCKET} AND due_jobs.turn != %(turn_1)s::INTEGER"
_USER = ("(CASE WHEN left(args, 1) = '[' THEN args::json ->> 0 ELSE coalesce(args::json "
         "#>> '{args,0,user_id}', args::json #>> '{kwargs,message,user_id}') END)")
_COUNT_IF = ("coalesce(sum(CASE WHEN ({col} {op} %(now)s::{ts}) THEN %({one})s::INTEGER "
             "ELSE %({zero})s::INTEGER END), %({dflt})s::INTEGER)")


def _head(n: int, state: int, turn: str, params: tuple[str, str, str]) -> str:
    due = _COUNT_IF.format(col=f"anon_{n}.due_at", op="<=", ts=_TS, one=params[0],
                           zero=params[1], dflt=params[2])
    return (f"SELECT count(*) AS n, {due} AS due, min(anon_{n}.due_at) AS oldest \nFROM "
            "(SELECT due_jobs.due_at AS due_at \nFROM due_jobs \nWHERE due_jobs.bucket = "
            f"%(bucket)s::VARCHAR AND due_jobs.state = %(state_{state})s::SMALLINT AND "
            f"due_jobs.turn {turn} %(turn_{state})s::INTEGER ORDER BY due_jobs.due_at \n "
            f"LIMIT %(cap)s) AS anon_{n}")


# -- opening: schema_check.check_schema's reads (the revision: hot_sql.py) -----------
#: bulk_indexes._PRESENT: the indexes of due_jobs in the current schema.
PRESENT_INDEXES = ReadSql("PRESENT_INDEXES", "SELECT indexname FROM pg_indexes WHERE "
                          "tablename = 'due_jobs' AND schemaname = current_schema()")
#: schema.secondary_indexes()'s names: a store lacking one refuses to open.
SECONDARY_INDEXES = ("ix_due_jobs_scheduled", "ix_due_jobs_dealt", "ix_due_jobs_dealt_due",
                     "ix_due_jobs_leased", "ix_due_jobs_early", "ix_due_jobs_user")

# -- estimates.bounded_stats ---------------------------------------------------------
TABLE_STATISTICS = ReadSql("TABLE_STATISTICS", text_queries.TABLE_STATISTICS)
COUNTER_TOTALS = ReadSql("COUNTER_TOTALS", "SELECT due_counters.bucket, due_counters.name, "
                         "due_counters.value \nFROM due_counters")
IN_FLIGHT = ReadSql(
    "IN_FLIGHT", "SELECT due_jobs.bucket, count(*) AS count_1, " + _COUNT_IF.format(
        col="due_jobs.due_at", op="<", ts=_TS, one="param_1", zero="param_2",
        dflt="coalesce_2") + " AS coalesce_1 \nFROM due_jobs \nWHERE due_jobs.state = "
    "%(state_1)s::SMALLINT GROUP BY due_jobs.bucket",
    {"param_1": 1, "param_2": 0, "coalesce_2": 0, "state_1": 1})
SET_ASIDE_CAPPED = ReadSql(
    "SET_ASIDE_CAPPED", "SELECT anon_1.bucket, count(*) AS count_1 \nFROM (SELECT "
    "due_jobs.bucket AS bucket \nFROM due_set_aside JOIN due_jobs ON due_jobs.job_key = "
    "due_set_aside.job_key AND due_jobs.state = %(state_1)s::SMALLINT \n LIMIT %(cap)s) "
    "AS anon_1 GROUP BY anon_1.bucket", {"state_1": 2})
SCHEDULED_BUCKETS = ReadSql(
    "SCHEDULED_BUCKETS", "WITH RECURSIVE b(bucket) AS ( SELECT min(bucket) FROM due_jobs "
    "WHERE state = 0 UNION ALL SELECT (SELECT min(bucket) FROM due_jobs WHERE state = 0 "
    "AND bucket > b.bucket) FROM b WHERE b.bucket IS NOT NULL) SELECT bucket FROM b "
    "WHERE bucket IS NOT NULL")
HEAD_PROBE = ReadSql(
    "HEAD_PROBE", "SELECT anon_1.n, anon_1.due, anon_1.oldest, anon_2.n AS n_1, "
    "anon_2.due AS due_1, anon_2.oldest AS oldest_1 \nFROM ("
    + _head(3, 1, "=", ("param_1", "param_2", "coalesce_1")) + ") AS anon_1 JOIN ("
    + _head(4, 2, "!=", ("param_3", "param_4", "coalesce_2")) + ") AS anon_2 ON true",
    {"param_1": 1, "param_2": 0, "coalesce_1": 0, "state_1": 0, "turn_1": 0, "param_3": 1,
     "param_4": 0, "coalesce_2": 0, "state_2": 0, "turn_2": 0}, utc=(2, 5))
ESTIMATE_SCHEDULED = ReadSql("ESTIMATE_SCHEDULED", "EXPLAIN (FORMAT JSON) SELECT 1 FROM "
                             "due_jobs WHERE bucket = %(bucket)s AND state = 0")

# -- estimates.bounded_histogram -----------------------------------------------------
_WINDOW = ("SELECT due_at FROM due_jobs WHERE bucket = %(bucket)s AND {where}"
           f" AND due_at >= %(t0)s::{_TS} + m.i * %(width)s * interval '1 second'"
           f" AND due_at < %(t0)s::{_TS} + (m.i + 1) * %(width)s * interval '1 second'"
           " ORDER BY due_at LIMIT %(cap)s")
WINDOW_PROBES = ReadSql(
    "WINDOW_PROBES",
    "SELECT m.i, p.n, p.last FROM generate_series(0, %(windows)s - 1) AS m(i)"
    " CROSS JOIN LATERAL (SELECT count(*) AS n, max(r.due_at) AS last FROM ("
    " SELECT due_at FROM ((" + _WINDOW.format(where="state = 0 AND turn = 0")
    + ") UNION ALL (" + _WINDOW.format(where="state = 0 AND turn <> 0")
    + ")) u ORDER BY due_at LIMIT %(cap)s) r) p ORDER BY m.i")

# -- control.JobControl.paused -------------------------------------------------------
PAUSED_BUCKETS = ReadSql("PAUSED_BUCKETS", "SELECT bucket_pauses.bucket, "
                         "bucket_pauses.paused_at \nFROM bucket_pauses", utc=(1,))

# -- fair.FairRows.state (fair_queries.py, for PostgreSQL) --------------------------
_FIXED = {"state_1": 0, "turn_1": 0}
FAIR_WINDOW = ReadSql(
    "FAIR_WINDOW", f"SELECT due_jobs.job_key, {_USER}, due_jobs.due_at \nFROM due_jobs \n"
    f"WHERE {_BUCKET} AND due_jobs.turn = %(turn_1)s::INTEGER AND due_jobs.due_at >= "
    f"%(start)s::{_TS} AND due_jobs.due_at <= %(now)s::{_TS} ORDER BY due_jobs.due_at \n "
    "LIMIT %(limit)s", _FIXED, utc=(2,))
DEALT_CAPPED = ReadSql(
    "DEALT_CAPPED", "SELECT count(*) AS count_1 \nFROM (SELECT due_jobs.job_key AS job_key "
    f"\nFROM due_jobs \n{_DEALT} \n LIMIT %(cap)s) AS anon_1", _FIXED)
_FIRST = " \n LIMIT %(param_1)s::INTEGER"
OLDEST_DEALT = ReadSql(
    "OLDEST_DEALT", f"SELECT due_jobs.due_at \nFROM due_jobs \n{_DEALT} ORDER BY "
    f"due_jobs.due_at{_FIRST}", {**_FIXED, "param_1": 1}, utc=(0,))
LOWEST_ROUND = ReadSql(
    "LOWEST_ROUND", f"SELECT due_jobs.turn \nFROM due_jobs \n{_DEALT} ORDER BY "
    f"due_jobs.turn, due_jobs.due_at{_FIRST}", {**_FIXED, "param_1": 1})
HIGHEST_ROUND = ReadSql(
    "HIGHEST_ROUND", f"SELECT due_jobs.turn \nFROM due_jobs \n{_DEALT} ORDER BY "
    f"due_jobs.turn DESC, due_jobs.due_at DESC{_FIRST}", {**_FIXED, "param_1": 1})
DEALT_USERS = ReadSql(
    "DEALT_USERS", f"SELECT anon_1.user_id, count(*) AS count_1 \nFROM (SELECT {_USER} AS "
    f"user_id \nFROM due_jobs \n{_DEALT} ORDER BY due_jobs.turn, due_jobs.due_at \n LIMIT "
    "%(limit)s) AS anon_1 GROUP BY anon_1.user_id", _FIXED)
COUNTER_TOTAL = ReadSql(
    "COUNTER_TOTAL", "SELECT due_counters.value \nFROM due_counters \nWHERE "
    "due_counters.bucket = %(bucket)s::VARCHAR AND due_counters.name = %(name)s::VARCHAR")

#: Every read of the bounded readings, by name (status_readings.py runs them by name).
STATEMENTS = {s.name: s for s in (
    TABLE_STATISTICS, COUNTER_TOTALS, IN_FLIGHT, SET_ASIDE_CAPPED, SCHEDULED_BUCKETS,
    HEAD_PROBE, ESTIMATE_SCHEDULED, WINDOW_PROBES, PAUSED_BUCKETS, FAIR_WINDOW, DEALT_CAPPED,
    OLDEST_DEALT, LOWEST_ROUND, HIGHEST_ROUND, DEALT_USERS, COUNTER_TOTAL)}
