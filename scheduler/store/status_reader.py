"""``recur status``'s store on PostgreSQL: its bounded readings on psycopg alone.

The command's every read of a PostgreSQL store is an index probe or an estimate
(status_readings.py): ~30-45 ms at 10M rows, where opening a ``DueStore`` cost
more (SQLAlchemy's import, ~0.4 s of wall, and compiling ~29 statements). So
:class:`StatusReader` runs status_sql.py's text (SQLAlchemy's own compilation,
held equal by tests/unit/test_status_sql.py) on one autocommit psycopg
connection, with the store's checks on opening (schema revision, no index
missing) and its error translation (connection.py). SQLite, and ``--exact`` (a
scan of the table, seconds at millions of rows), keep ``DueStore``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg

from config.errors import SchemaOutOfDate
from scheduler.store import hot_sql, status_sql
from scheduler.store import status_readings as sr
from scheduler.store.connection import connect_libpq, libpq_url, shown_url, store_errors, translated


def _utc(value: Any) -> Any:
    """As ``UtcDateTime`` hands a value out: aware, in UTC."""
    if not isinstance(value, datetime):
        return value
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class StatusReader:
    """A PostgreSQL store as ``recur status`` reads it, without SQLAlchemy."""

    dialect = "postgresql"

    def __init__(self, url: str) -> None:
        self.url = shown_url(url)
        self._libpq = libpq_url(url)
        self._conn: psycopg.Connection[Any] | None = None

    @classmethod
    def open(cls, url: str) -> StatusReader:
        """Connect to ``url``; refuse a schema that is not at this code's revision, or
        lacks an index (as ``DueStore.open``: schema_check.check_schema)."""
        reader = cls(url)
        try:
            reader.check_schema()
        except BaseException:
            reader.close()
            raise
        return reader

    def check_schema(self) -> None:
        from scheduler.store.schema_check import VERSION_TABLE, head_revision, no_usable_schema

        with translated(f"due-jobs database {self.url}"):
            self._conn = connect_libpq(self._libpq)
            present = self._rows(hot_sql.TABLE_EXISTS, {"table": VERSION_TABLE})[0][0]
            if not present and (nowhere := no_usable_schema(
                    self.url, self._rows(hot_sql.CURRENT_SCHEMA, {})[0])) is not None:
                raise nowhere
            found = self._rows(hot_sql.SCHEMA_REVISION, {}) if present else []
            have = ",".join(sorted(str(r[0]) for r in found)) or None
            want = head_revision()
            if have != want:
                raise SchemaOutOfDate(f"due-jobs schema of {self.url} is at revision "
                                      f"{have or 'none'}, this code needs {want}: run "
                                      "`recur db upgrade`")
            indexes = {str(r[0]) for r in self._rows(status_sql.PRESENT_INDEXES, {})}
        unbuilt = [name for name in status_sql.SECONDARY_INDEXES if name not in indexes]
        if unbuilt:  # a seed that was stopped before it built them (bulk_indexes.py)
            raise SchemaOutOfDate(f"due-jobs store {self.url} lacks the indexes "
                                  f"{', '.join(unbuilt)}: run `recur db upgrade` to build them")

    def _rows(self, stmt: hot_sql.HotSql | status_sql.ReadSql, params: dict[str, Any]
              ) -> list[tuple[Any, ...]]:
        assert self._conn is not None, "StatusReader.open connects"
        cur = self._conn.execute(stmt.sql, {**stmt.defaults, **params})
        rows = cur.fetchall() if cur.description else []
        utc = getattr(stmt, "utc", ())
        if not utc:
            return rows
        return [tuple(_utc(v) if i in utc else v for i, v in enumerate(r)) for r in rows]

    def _run(self, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        return self._rows(status_sql.STATEMENTS[name], params)

    def stats(self, buckets: Sequence[str], now: datetime, cap: int = sr.HEAD_CAP
              ) -> sr.Readings:
        """estimates.bounded_stats on PostgreSQL."""
        with store_errors(self.url, "read the buckets' heads and estimates"):
            return sr.bounded_stats(self._run, buckets, now, cap)

    def histogram(self, buckets: Sequence[str], now: datetime, minutes: int,
                  cap: int = sr.MINUTE_CAP) -> sr.Histogram:
        """estimates.bounded_histogram on PostgreSQL."""
        with store_errors(self.url, "probe the due-time histogram"):
            return sr.bounded_histogram(self._run, buckets, now, minutes, cap)

    def paused(self) -> dict[str, datetime]:
        """control.JobControl.paused."""
        with store_errors(self.url, "read paused buckets"):
            return sr.paused(self._run)

    def fair_state(self, bucket: str, now: datetime, head_cap: int, cap: int
                   ) -> sr.FairState:
        """fair.FairRows.state on PostgreSQL."""
        with store_errors(self.url, f"read the fair share of bucket {bucket}"):
            return sr.fair_state(self._run, bucket, now, head_cap, cap)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
