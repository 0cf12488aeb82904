"""A worker's statements as PostgreSQL text, for psycopg alone (no SQLAlchemy).

A worker on PostgreSQL reads its row's token and settles the row (reschedule,
finish, lease) on psycopg connections (raw_pool.py); loading SQLAlchemy only to
compile these few statements cost every worker process ~12 MB. So they are kept
here as the text SQLAlchemy compiles from ``queries.py`` for psycopg, with the
values of their fixed parameters: ``queries.py`` stays the one source, and
tests/unit/test_hot_sql.py holds each text equal to its compilation. The state
numbers are ``schema.py``'s (the same test holds them equal).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

#: Row states and the "no floor" pull-forward time (scheduler/store/schema.py).
SCHEDULED, DISPATCHED, SET_ASIDE = 0, 1, 2
#: The top of an INTEGER counter: a reschedule's runs count stays there (schema.INT_MAX).
INT_MAX = 2**31 - 1
NO_FLOOR = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, eq=False)
class HotSql:
    """One statement as psycopg takes it, with its fixed parameters' values."""

    name: str
    sql: str
    defaults: dict[str, Any] = field(default_factory=dict)


def _hot(name: str, sql: str, **defaults: Any) -> HotSql:
    return HotSql(name, sql, defaults)


_KEY = "WHERE due_jobs.job_key = %(key)s::VARCHAR"
_CURRENT = (f"{_KEY} AND due_jobs.token = %(current)s::INTEGER "
            "AND due_jobs.state = %(state_1)s::SMALLINT")
_TS = "TIMESTAMP WITH TIME ZONE"

# queries.PEEK_DISPATCH / LIVE_DISPATCH: the run's token check.
PEEK_DISPATCH = _hot("PEEK_DISPATCH", "SELECT due_jobs.token, due_jobs.due_at, "
                     f"due_jobs.state \nFROM due_jobs \n{_KEY}", key=None)
LIVE_DISPATCH = _hot("LIVE_DISPATCH", f"{PEEK_DISPATCH.sql} FOR SHARE", key=None)
# queries.RESCHEDULE: token-checked dispatched -> scheduled.
RESCHEDULE = _hot(
    "RESCHEDULE", f"UPDATE due_jobs SET due_at=%(due)s::{_TS}, updated_at=%(now)s::{_TS}, "
    "attempts=%(attempts)s::SMALLINT, state=%(state)s::SMALLINT, "
    "args=coalesce(%(new_args)s::VARCHAR, due_jobs.args), early_at=%(early)s::"
    f"{_TS}, runs=CASE WHEN (due_jobs.runs >= %(runs_1)s::INTEGER) THEN %(param_1)s::INTEGER "
    f"ELSE due_jobs.runs + %(runs_2)s::INTEGER END {_CURRENT}",
    due=None, now=None, attempts=0, state=SCHEDULED, new_args=None, early=None,
    runs_1=INT_MAX, param_1=INT_MAX, runs_2=1, key=None, current=None, state_1=DISPATCHED)
# queries.FINISH: token-checked delete of a one-shot job.
FINISH = _hot("FINISH", f"DELETE FROM due_jobs {_CURRENT}", key=None, current=None,
              state_1=DISPATCHED)
# queries.SET_LEASE: move the live dispatch's lease end (token-checked).
SET_LEASE = _hot(
    "SET_LEASE", f"UPDATE due_jobs SET due_at=%(lease)s::{_TS}, updated_at=%(now)s::{_TS} "
    f"{_CURRENT} AND due_jobs.due_at != %(lease)s::{_TS}",
    lease=None, now=None, key=None, current=None, state_1=DISPATCHED)
# queries.SERVER_STARTED: the server's identity for the settle journal.
SERVER_STARTED = _hot(
    "SERVER_STARTED", "SELECT pg_postmaster_start_time() AS pg_postmaster_start_time_1, "
    "(SELECT pg_stat_archiver.stats_reset \nFROM pg_stat_archiver) AS anon_1")
#: The writes that commit without waiting for the WAL flush (queries.JOURNALED).
JOURNALED = (RESCHEDULE, FINISH, SET_LEASE)

# queries.TASK_CODES / register_tasks: task names and their codes.
TASK_CODES = _hot("TASK_CODES", "SELECT due_tasks.code, due_tasks.name \nFROM due_tasks")
REGISTER_TASK = _hot("REGISTER_TASK", "INSERT INTO due_tasks (name) VALUES "
                     "(%(name)s::VARCHAR) ON CONFLICT (name) DO NOTHING")
# queries.upsert_jobs("postgresql") for the columns DueStore.schedule writes.
UPSERT_COLUMNS = ("due_at", "created_at", "updated_at", "task_id", "job_key", "bucket",
                  "args", "early_at")
_WHEN_ASIDE = "WHEN (due_jobs.state = %(state_2)s::SMALLINT)"
UPSERT_JOB = _hot(
    "UPSERT_JOB", "INSERT INTO due_jobs (" + ", ".join(UPSERT_COLUMNS) + ") VALUES ("
    f"%(due_at)s::{_TS}, %(created_at)s::{_TS}, %(updated_at)s::{_TS}, "
    "%(task_id)s::SMALLINT, %(job_key)s::VARCHAR, %(bucket)s::VARCHAR, %(args)s::VARCHAR, "
    f"%(early_at)s::{_TS}) ON CONFLICT (job_key) DO UPDATE SET due_at = CASE WHEN "
    f"(due_jobs.state = %(state_1)s::SMALLINT) THEN excluded.due_at {_WHEN_ASIDE} THEN "
    "excluded.due_at ELSE due_jobs.due_at END, updated_at = excluded.updated_at, "
    f"attempts = CASE {_WHEN_ASIDE} THEN %(param_1)s::INTEGER ELSE due_jobs.attempts END, "
    f"state = CASE {_WHEN_ASIDE} THEN %(param_2)s::INTEGER ELSE due_jobs.state END, "
    "task_id = excluded.task_id, bucket = excluded.bucket, args = excluded.args, "
    f"early_at = CASE {_WHEN_ASIDE} THEN excluded.early_at WHEN (due_jobs.state = "
    "%(state_3)s::SMALLINT AND excluded.early_at > due_jobs.early_at) THEN "
    "excluded.early_at ELSE due_jobs.early_at END, turn = %(param_3)s::INTEGER",
    state_1=SCHEDULED, state_2=SET_ASIDE, param_1=0, param_2=SCHEDULED, state_3=SCHEDULED,
    param_3=0)

# schema_check.current_revision: the revision the database is at (its version table).
TABLE_EXISTS = _hot("TABLE_EXISTS", "SELECT to_regclass(%(table)s) IS NOT NULL")
SCHEMA_REVISION = _hot("SCHEMA_REVISION", "SELECT version_num FROM recur_schema_version")
#: schema_check.no_usable_schema: the schema new tables go to (NULL: the search_path names
#: none this role can use) and the search_path that named it.
CURRENT_SCHEMA = _hot("CURRENT_SCHEMA", "SELECT current_schema(), current_setting('search_path')")
#: A transaction that stays open while the broker confirms what it published (the
#: dispatch, the dead-lettering of poison jobs): a role's idle_in_transaction_session_timeout
#: shorter than a publish would end its session, every pass publishing the batch again.
PUBLISHING = _hot("PUBLISHING", "SET LOCAL idle_in_transaction_session_timeout = 0")
#: schema_check.unwritable: read-only sessions (a hot standby, default_transaction_read_only)
#: and whether this role may write due_jobs (has_table_privilege: any of a list, so one each).
STORE_WRITABLE = _hot(
    "STORE_WRITABLE", "SELECT current_setting('transaction_read_only'), "
    "has_table_privilege('due_jobs', 'INSERT') AND has_table_privilege('due_jobs', 'UPDATE') "
    "AND has_table_privilege('due_jobs', 'DELETE')")

# -- many runs' statements at once (settle_batch.py): written here, no SQLAlchemy twin --
#: The rows of ``keys`` that exist, as four arrays (one result row: one fetch).
PEEK_MANY = _hot(
    "PEEK_MANY", "SELECT array_agg(job_key), array_agg(token), array_agg(due_at), "
    "array_agg(state) FROM due_jobs WHERE job_key = ANY(CAST(%(keys)s AS text[]))")
#: RESCHEDULE for many rows (each its own token check); the keys it moved, in an array.
RESCHEDULE_MANY = _hot(
    "RESCHEDULE_MANY",
    "WITH v AS (SELECT * FROM unnest(CAST(%(keys)s AS text[]), CAST(%(tokens)s AS "
    "integer[]), CAST(%(dues)s AS timestamptz[]), CAST(%(earlies)s AS timestamptz[]), "
    "CAST(%(args)s AS text[])) AS v(job_key, token, due_at, early_at, args)), "
    "u AS (UPDATE due_jobs d SET state = %(scheduled)s, due_at = v.due_at, attempts = 0, "
    "early_at = v.early_at, runs = CASE WHEN d.runs >= %(top)s THEN %(top)s ELSE d.runs + 1 "
    "END, updated_at = %(now)s, "
    "args = coalesce(v.args, d.args) FROM v WHERE d.job_key = v.job_key "
    "AND d.token = v.token AND d.state = %(dispatched)s RETURNING d.job_key) "
    "SELECT array_agg(job_key) FROM u", scheduled=SCHEDULED, dispatched=DISPATCHED, top=INT_MAX)
