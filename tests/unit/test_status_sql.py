"""``recur status``'s PostgreSQL statements as text (scheduler/store/status_sql.py) are
exactly what SQLAlchemy compiles from the statements DueStore runs under the same names
(estimates.STATEMENTS, fair.state_statements, control's paused buckets): one source."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.dialects.postgresql.psycopg import dialect as psycopg_dialect

from scheduler.store import bulk_indexes, estimates, fair, operator_queries, schema, status_sql
from scheduler.store.schema import UtcDateTime

#: Each name status_readings.py runs, and the SQLAlchemy statement DueStore runs for it.
SOURCES: dict[str, Any] = {**estimates.STATEMENTS, **fair.state_statements("postgresql"),
                           "PAUSED_BUCKETS": operator_queries.PAUSED_BUCKETS}


def compiled(stmt: Any) -> tuple[str, dict[str, Any]]:
    """The text and the fixed parameters' values (those a call gives: None)."""
    result = stmt.compile(dialect=psycopg_dialect())  # type: ignore[no-untyped-call]
    return str(result), {k: v for k, v in result.params.items() if v is not None}


def utc_columns(stmt: Any) -> tuple[int, ...]:
    """The result columns SQLAlchemy hands out through ``UtcDateTime`` (text: none)."""
    columns = getattr(stmt, "selected_columns", ())
    return tuple(i for i, c in enumerate(columns) if isinstance(c.type, UtcDateTime))


def test_every_statement_has_its_source_and_no_more() -> None:
    assert set(status_sql.STATEMENTS) == set(SOURCES)


@pytest.mark.parametrize("name", sorted(status_sql.STATEMENTS))
def test_status_statement_is_the_compiled_one(name: str) -> None:
    text = status_sql.STATEMENTS[name]
    assert text.name == name
    assert (text.sql, text.defaults) == compiled(SOURCES[name])
    assert text.utc == utc_columns(SOURCES[name])


def test_the_index_check_is_the_schema_s() -> None:
    assert status_sql.PRESENT_INDEXES.sql == compiled(bulk_indexes._PRESENT)[0]
    assert list(status_sql.SECONDARY_INDEXES) == list(schema.secondary_indexes())
