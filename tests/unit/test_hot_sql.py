"""The worker's PostgreSQL statements as text (scheduler/store/hot_sql.py) are exactly
what SQLAlchemy compiles from queries.py: one source of truth, checked here."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.dialects.postgresql.psycopg import dialect as psycopg_dialect
from sqlalchemy.sql.elements import ClauseElement

from scheduler.store import hot_sql, queries, schema

PAIRS = [
    (hot_sql.PEEK_DISPATCH, queries.PEEK_DISPATCH, None),
    (hot_sql.LIVE_DISPATCH, queries.LIVE_DISPATCH, None),
    (hot_sql.RESCHEDULE, queries.RESCHEDULE, None),
    (hot_sql.FINISH, queries.FINISH, None),
    (hot_sql.SET_LEASE, queries.SET_LEASE, None),
    (hot_sql.SERVER_STARTED, queries.SERVER_STARTED, None),
    (hot_sql.TASK_CODES, queries.TASK_CODES, None),
    (hot_sql.UPSERT_JOB, queries.upsert_jobs("postgresql"), list(hot_sql.UPSERT_COLUMNS)),
]


def compiled(stmt: ClauseElement, columns: list[str] | None) -> tuple[str, dict[str, Any]]:
    """What raw_pool.py ran before: the text and the fixed parameters' values (a row's
    own columns, which every call gives, left out)."""
    result = stmt.compile(dialect=psycopg_dialect(),  # type: ignore[no-untyped-call]
                          column_keys=columns)
    return str(result), {k: v for k, v in result.params.items()
                         if columns is None or k not in columns}


@pytest.mark.parametrize(("hot", "stmt", "columns"), PAIRS, ids=[p[0].name for p in PAIRS])
def test_hot_statement_is_the_compiled_one(hot: hot_sql.HotSql, stmt: Any,
                                           columns: list[str] | None) -> None:
    assert (hot.sql, hot.defaults) == compiled(stmt, columns)


def test_register_task_is_the_compiled_one() -> None:
    # Compiled for one row SQLAlchemy adds RETURNING (its own single-row insert); the
    # worker registers names with executemany, as DueStore does, without it.
    text, _ = compiled(queries.register_tasks("postgresql"), ["name"])
    assert text.split(" RETURNING ")[0] == hot_sql.REGISTER_TASK.sql


def test_states_are_the_schema_s() -> None:
    assert (hot_sql.SCHEDULED, hot_sql.DISPATCHED, hot_sql.SET_ASIDE, hot_sql.NO_FLOOR,
            hot_sql.INT_MAX) == (schema.SCHEDULED, schema.DISPATCHED, schema.SET_ASIDE,
                                 schema.NO_FLOOR, schema.INT_MAX)


def test_journaled_writes_are_the_same_statements() -> None:
    assert [h.name for h in hot_sql.JOURNALED] == ["RESCHEDULE", "FINISH", "SET_LEASE"]
    assert queries.JOURNALED == (queries.RESCHEDULE, queries.FINISH, queries.SET_LEASE)


def test_the_revision_read_names_the_version_table() -> None:
    from scheduler.store.schema_check import VERSION_TABLE

    assert hot_sql.SCHEMA_REVISION.sql.endswith(f"FROM {VERSION_TABLE}")
