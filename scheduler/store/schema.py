"""The due-jobs tables as SQLAlchemy Core objects (the migrations create them).

Timestamps are always timezone-aware UTC in Python. PostgreSQL stores them as
``timestamptz``; SQLite, which has no time zone type, as naive UTC text in
SQLAlchemy's sortable format, so ``due_at <= :now`` compares correctly.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Dialect,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    Table,
    Text,
    case,
    text,
)
from sqlalchemy.types import TypeDecorator

from config.first_seen import FirstSeen

#: Row states: waiting for its time, or published and leased to a worker.
SCHEDULED = 0
DISPATCHED = 1
#: Set aside by the scheduler: the broker cannot take the row's message (too large, a
#: bucket no longer in the table, a call that cannot be decoded). No index covers the
#: state (they are partial on 0 and 1), so no claim, recovery or drain sees it again;
#: ``due_set_aside`` holds why (scheduler/store/aside.py).
SET_ASIDE = 2
#: The largest INTEGER (token, runs, turn) and SMALLINT (attempts) a row holds. A
#: counter another writer left at its top must not overflow the statement that adds
#: one: on PostgreSQL that fails the whole batch (every row of the bucket, each pass).
#: So a dispatch's token wraps to 1 and the attempts and runs counts stay at the top.
INT_MAX = 2**31 - 1
SMALLINT_MAX = 2**15 - 1


def next_token(token: int) -> int:
    """The token the row's next dispatch takes (as MARK_DISPATCHED writes it): one more,
    wrapping to 1 past INT_MAX."""
    return 1 if token >= INT_MAX else token + 1


#: What a time SQLite holds as unreadable text reads as: the epoch, so a due row whose
#: time another writer garbled is overdue (run, and its reschedule writes a real time)
#: and a listing shows it, instead of the row failing every claim of its bucket.
UNREADABLE_TIME = datetime(1970, 1, 1, tzinfo=UTC)
_unreadable = FirstSeen()


def unreadable_time(text: str) -> datetime:
    """UNREADABLE_TIME for ``text``, with one WARNING per distinct text."""
    if _unreadable.first(text):
        logging.getLogger("recur.store").warning(
            "a time in the store is not a time: %.60r; read as %s (overdue)", text,
            UNREADABLE_TIME.isoformat())
    return UNREADABLE_TIME


class UtcDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every database; naive values are refused."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: give a timezone-aware UTC time")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def result_processor(self, dialect: Dialect, coltype: Any) -> Any:
        """SQLite keeps a time as text, any text another writer put there: one that is not
        a time reads as UNREADABLE_TIME (one row must not stop every read of its table)."""
        read = super().result_processor(dialect, coltype)
        if dialect.name != "sqlite" or read is None:
            return read

        def tolerant(value: Any) -> Any:
            try:
                return read(value)
            except ValueError:
                return unreadable_time(str(value))

        return tolerant

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, str):  # SQLite CURRENT_TIMESTAMP defaults
            value = datetime.fromisoformat(value)
        moment: datetime = value
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


NOW = text("CURRENT_TIMESTAMP")
#: The predicates of the drain index and of the dealt rows' indexes (migration 0007).
UNDEALT = "state = 0 AND turn = 0"
DEALT = "state = 0 AND turn <> 0"
#: Index storage parameter of the indexes whose entries arrive in key order (0008).
PACKED = {"fillfactor": 100}
metadata = MetaData()

#: The task names the rows refer to by a small code: at tens of millions of
#: rows a 22-byte name in every row was a tenth of the table.
due_tasks = Table(
    "due_tasks", metadata,
    Column("code", SmallInteger, primary_key=True),
    Column("name", Text, nullable=False, unique=True),
)

due_jobs = Table(
    "due_jobs", metadata,
    # When the scheduler acts on the row next: for a scheduled row its due
    # time, for a dispatched one the end of its lease (like a queue's
    # visibility timeout). One column for both keeps every column NOT NULL,
    # so PostgreSQL rows carry no null bitmap: 16 bytes less per row.
    Column("due_at", UtcDateTime, nullable=False),
    Column("created_at", UtcDateTime, nullable=False, server_default=NOW),
    Column("updated_at", UtcDateTime, nullable=False, server_default=NOW),
    Column("token", Integer, nullable=False, server_default=text("0")),
    Column("attempts", SmallInteger, nullable=False, server_default=text("0")),
    Column("state", SmallInteger, nullable=False, server_default=text("0")),
    Column("task_id", SmallInteger, nullable=False),
    Column("job_key", Text, primary_key=True),
    Column("bucket", Text, nullable=False),
    Column("args", Text, nullable=False),
    # The earliest time the idle pull-forward may dispatch a scheduled row (its
    # floor, scheduler/pullforward.py); NO_FLOOR for rows that never ran.
    Column("early_at", UtcDateTime, nullable=False, server_default=text("'1970-01-01'")),
    # Runs that rescheduled the job (shown by `recur jobs show`).
    Column("runs", Integer, nullable=False, server_default=text("0")),
    # Fair share (scheduler/fair_share.py): 0, or the round a scheduled row was dealt
    # into while its bucket was behind. Every other write makes it 0 again.
    Column("turn", Integer, nullable=False, server_default=text("0")),
    # The drain reads the earliest scheduled rows of one bucket: partial, so
    # dispatched rows (and rows dealt into rounds) cost nothing in it.
    # Packed (fillfactor 100, migration 0008): new entries go to the end of a bucket's range.
    Index("ix_due_jobs_scheduled", "bucket", "due_at", postgresql_with=PACKED,
          postgresql_where=text(UNDEALT), sqlite_where=text(UNDEALT)),
    # Rows dealt into rounds: claimed by round, then due time; read in due order (lag,
    # lists).
    Index("ix_due_jobs_dealt", "bucket", "turn", "due_at",
          postgresql_where=text(DEALT), sqlite_where=text(DEALT)),
    Index("ix_due_jobs_dealt_due", "bucket", "due_at", "job_key",
          postgresql_where=text(DEALT), sqlite_where=text(DEALT)),
    # The lease monitor reads the dispatched rows whose lease ran out.
    Index("ix_due_jobs_leased", "due_at",
          postgresql_where=text("state = 1"), sqlite_where=text("state = 1")),
    # The pull-forward reads the scheduled rows of one bucket whose floor passed.
    Index("ix_due_jobs_early", "bucket", "early_at", "due_at", postgresql_with=PACKED,
          postgresql_where=text("state = 0"), sqlite_where=text("state = 0")),
    # ix_due_jobs_user: one user's rows, on USER_SQL (migration 0005). PostgreSQL: on the
    # user alone (0008), deduplicated to a few bytes a row; SQLite: (USER_SQL, job_key).
)

#: What a dispatch and a reschedule add to the counters (INT_MAX and SMALLINT_MAX above).
NEXT_TOKEN = case((due_jobs.c.token >= INT_MAX, 1), else_=due_jobs.c.token + 1)
NEXT_ATTEMPT = case((due_jobs.c.attempts >= SMALLINT_MAX, SMALLINT_MAX),
                    else_=due_jobs.c.attempts + 1)
NEXT_RUN = case((due_jobs.c.runs >= INT_MAX, INT_MAX), else_=due_jobs.c.runs + 1)

#: No pull-forward floor: the ``early_at`` of rows that never ran (the column default).
NO_FLOOR = datetime(1970, 1, 1, tzinfo=UTC)

#: The user id of a row's message, as migration 0005 indexes it (``ix_due_jobs_user``):
#: a query must use exactly this text for the index to serve it.
USER_SQL = {
    "postgresql": ("(CASE WHEN left(args, 1) = '[' THEN args::json ->> 0 ELSE "
                   "coalesce(args::json #>> '{args,0,user_id}', "
                   "args::json #>> '{kwargs,message,user_id}') END)"),
    "sqlite": ("(CASE WHEN substr(args, 1, 1) = '[' THEN json_extract(args, '$[0]') ELSE "
               "coalesce(json_extract(args, '$.args[0].user_id'), "
               "json_extract(args, '$.kwargs.message.user_id')) END)"),
}



def secondary_indexes() -> dict[str, str]:
    """Every index of due_jobs on PostgreSQL but the primary key, as migration 0008 leaves
    them: name → CREATE INDEX statement. The seed builds them again from here after
    loading an empty store without them (scheduler/store/bulk_indexes.py)."""
    packed = "WITH (fillfactor = 100) "
    on = {
        "ix_due_jobs_scheduled": f"(bucket, due_at) {packed}WHERE {UNDEALT}",
        "ix_due_jobs_dealt": f"(bucket, turn, due_at) WHERE {DEALT}",
        "ix_due_jobs_dealt_due": f"(bucket, due_at, job_key) WHERE {DEALT}",
        "ix_due_jobs_leased": "(due_at) WHERE state = 1",
        "ix_due_jobs_early": f"(bucket, early_at, due_at) {packed}WHERE state = 0",
        "ix_due_jobs_user": f"({USER_SQL['postgresql']})",
    }
    return {name: f"CREATE INDEX IF NOT EXISTS {name} ON due_jobs {what}"
            for name, what in on.items()}


#: Buckets whose due jobs the scheduler does not dispatch (`recur bucket pause`).
bucket_pauses = Table(
    "bucket_pauses", metadata,
    Column("bucket", Text, primary_key=True),
    Column("paused_at", UtcDateTime, nullable=False),
)

#: Running totals the scheduler keeps per bucket (e.g. expired leases recovered).
due_counters = Table(
    "due_counters", metadata,
    Column("bucket", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("value", BigInteger, nullable=False, server_default=text("0")),
    PrimaryKeyConstraint("bucket", "name"),
)

#: Why each set-aside row (state SET_ASIDE) was set aside: a table of its own, so the
#: tens of millions of other rows carry no reason column. An entry whose row is no
#: longer set aside (cancelled, replayed, written again) is ignored and swept.
due_set_aside = Table(
    "due_set_aside", metadata,
    Column("job_key", Text, primary_key=True),
    Column("bucket", Text, nullable=False),
    Column("reason", Text, nullable=False),
    Column("set_at", UtcDateTime, nullable=False),
    Index("ix_due_set_aside_bucket", "bucket", "set_at"),
)

#: Beat-style entries: each period, one due job is written for it.
periodic_entries = Table(
    "periodic_entries", metadata,
    Column("name", Text, primary_key=True),
    Column("task", Text, nullable=False),
    Column("bucket", Text, nullable=False),
    Column("args", Text, nullable=False),
    Column("schedule", Text, nullable=False),
    Column("next_run_at", UtcDateTime, nullable=False),
    Column("last_run_at", UtcDateTime, nullable=True),
)
