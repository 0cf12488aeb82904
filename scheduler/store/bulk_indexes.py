"""The seed's index plan: load an empty store without its secondary indexes, then build them.

Keeping six indexes up to date row by row costs the seed about half its speed, and
leaves them loosely packed; building them once after the load is a sort each,
and packs them. So a seed into an EMPTY PostgreSQL store drops every index of
``due_jobs`` but the primary key (which keeps the load idempotent) before
loading (:func:`defer_indexes`) and builds them after (:func:`build_indexes`,
also run when the load fails). A store that already holds rows keeps its
indexes: the scheduler may be reading them.

A seed killed between the two leaves the store without those indexes. It is
not left so for good: every process that opens the store refuses to start
(:func:`scheduler.store.schema_check.check_schema`, and so ``recur doctor``)
naming ``recur db upgrade``, which builds whatever index is missing
(:func:`scheduler.store.migrate.upgrade`).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Engine, text
from sqlalchemy.engine import make_url

from scheduler.store.connection import is_sqlite, make_engine, translated
from scheduler.store.schema import secondary_indexes

#: Sort memory for an index build: 10M rows' keys sort in memory instead of in runs.
BUILD_MEMORY = "SET maintenance_work_mem = '512MB'"
_PRESENT = text("SELECT indexname FROM pg_indexes WHERE tablename = 'due_jobs' "
                "AND schemaname = current_schema()")


def missing_indexes(conn: Connection) -> list[str]:
    """The secondary indexes of due_jobs the store lacks (PostgreSQL)."""
    present = set(conn.execute(_PRESENT).scalars())
    return [name for name in secondary_indexes() if name not in present]


def _begin(url: str) -> Any:
    return translated(f"due-jobs database {make_url(url)!r}")


def defer_indexes(url: str) -> list[str]:
    """Drop the secondary indexes if due_jobs is empty; the names dropped.

    One transaction: the table is locked against writes, found empty, and the
    indexes go; a writer that comes in between waits and then writes an empty
    store's row without them (the build after the load indexes it).
    """
    if is_sqlite(url):
        return []
    engine = make_engine(url)
    try:
        with _begin(url), engine.begin() as conn:
            conn.execute(text("LOCK TABLE due_jobs IN SHARE ROW EXCLUSIVE MODE"))
            if conn.execute(text("SELECT EXISTS (SELECT 1 FROM due_jobs)")).scalar():
                return []
            present = set(conn.execute(_PRESENT).scalars())
            dropped = [name for name in secondary_indexes() if name in present]
            for name in dropped:
                conn.execute(text(f"DROP INDEX {name}"))
            return dropped
    finally:
        engine.dispose()


def build_missing(engine: Engine) -> list[str]:
    """Build every missing secondary index of due_jobs, then analyze; the names built."""
    if engine.dialect.name != "postgresql":
        return []
    with translated(f"due-jobs database {engine.url!r}"), engine.connect() as conn:
        conn.execute(text(BUILD_MEMORY))
        built = missing_indexes(conn)
        ddl = secondary_indexes()
        for name in built:
            conn.execute(text(ddl[name]))
            conn.commit()
        if built:
            conn.execute(text("ANALYZE due_jobs"))
            conn.commit()
        return built


def build_indexes(url: str) -> list[str]:
    """:func:`build_missing` on the store at ``url``."""
    engine = make_engine(url)
    try:
        return build_missing(engine)
    finally:
        engine.dispose()
