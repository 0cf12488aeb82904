"""The due-jobs tables as SQLAlchemy Core objects (the migrations create them).

Timestamps are always timezone-aware UTC in Python. PostgreSQL stores them as
``timestamptz``; SQLite, which has no time zone type, as naive UTC text in
SQLAlchemy's sortable format, so ``due_at <= :now`` compares correctly.
"""

from __future__ import annotations

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
    text,
)
from sqlalchemy.types import TypeDecorator

#: Row states: waiting for its time, or published and leased to a worker.
SCHEDULED = 0
DISPATCHED = 1


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

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, str):  # SQLite CURRENT_TIMESTAMP defaults
            value = datetime.fromisoformat(value)
        moment: datetime = value
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


NOW = text("CURRENT_TIMESTAMP")
metadata = MetaData()

due_jobs = Table(
    "due_jobs", metadata,
    Column("job_key", Text, primary_key=True),
    Column("task", Text, nullable=False),
    Column("bucket", Text, nullable=False),
    Column("args", Text, nullable=False),
    Column("due_at", UtcDateTime, nullable=False),
    Column("state", SmallInteger, nullable=False, server_default=text("0")),
    Column("lease_until", UtcDateTime, nullable=True),
    Column("token", BigInteger, nullable=False, server_default=text("0")),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("created_at", UtcDateTime, nullable=False, server_default=NOW),
    Column("updated_at", UtcDateTime, nullable=False, server_default=NOW),
    # The drain reads the earliest scheduled rows of one bucket: partial, so
    # dispatched rows cost nothing in it.
    Index("ix_due_jobs_scheduled", "bucket", "due_at",
          postgresql_where=text("state = 0"), sqlite_where=text("state = 0")),
    # The lease monitor reads the dispatched rows whose lease ran out.
    Index("ix_due_jobs_leased", "lease_until",
          postgresql_where=text("state = 1"), sqlite_where=text("state = 1")),
)

#: Running totals the scheduler keeps per bucket (e.g. expired leases recovered).
due_counters = Table(
    "due_counters", metadata,
    Column("bucket", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("value", BigInteger, nullable=False, server_default=text("0")),
    PrimaryKeyConstraint("bucket", "name"),
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
