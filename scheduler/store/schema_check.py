"""Is the database at this code's newest schema revision? Answered without alembic.

Every process that opens the store asks (workers too), but only ``recur db
upgrade`` migrates. Alembic, with Mako and its DDL machinery, is ~100 modules and
7 MB in every worker process that imports it, so the check reads the revision ids
from the migration files' text and the database's version table with one
SELECT (on PostgreSQL one more: no index missing, as a stopped seed leaves them);
:mod:`scheduler.store.migrate` (alembic) runs the migrations and re-exports these.
A unit test holds :func:`head_revision` equal to alembic's own answer.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from config.errors import SchemaOutOfDate, StoreUnusable
from scheduler.store.connection import translated

if TYPE_CHECKING:  # SQLAlchemy only where an engine is used: a worker reads head_revision
    from sqlalchemy import Engine

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
#: Our own version table, so another alembic user of the same database cannot collide.
VERSION_TABLE = "recur_schema_version"
_REVISION = re.compile(r"^revision\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", re.MULTILINE)
_DOWN = re.compile(r"^down_revision\s*(?::[^=]*)?=\s*(.*)$", re.MULTILINE)


def head_revision() -> str:
    """The newest migration this code knows: the one revision no other revises."""
    revisions: set[str] = set()
    revised: set[str] = set()
    for path in (MIGRATIONS / "versions").glob("*.py"):
        text = path.read_text()
        if (found := _REVISION.search(text)) is None:
            continue
        revisions.add(found.group(1))
        if (down := _DOWN.search(text)) is not None:
            revised.update(re.findall(r"['\"]([^'\"]+)['\"]", down.group(1)))
    heads = revisions - revised
    assert len(heads) == 1, f"expected one head revision in {MIGRATIONS}, found {heads}"
    return heads.pop()


def no_usable_schema(url: str, row: Any) -> StoreUnusable | None:
    """The error for a PostgreSQL ``search_path`` that names no schema this role can use
    (``row``: hot_sql.CURRENT_SCHEMA's), else None: without it the store would be told to
    run `recur db upgrade`, which cannot create its tables there either."""
    if row is None or row[0] is not None:
        return None
    return StoreUnusable(
        f"due-jobs store {url}: its search_path ({row[1]}) names no schema this role can "
        "use: the schema does not exist or the role lacks USAGE on it (CREATE SCHEMA, "
        "GRANT USAGE ON SCHEMA ... TO the role, or fix -csearch_path in the URL's options)")


def unwritable(url: str, row: Any) -> StoreUnusable | None:
    """The error for a store a worker can read but not write (``row``:
    hot_sql.STORE_WRITABLE's), else None: each run's reschedule would fail and its message
    be dead-lettered, so the worker refuses to start instead."""
    read_only, may_write = row
    if read_only == "on":
        return StoreUnusable(
            f"due-jobs store {url} is read-only (a hot standby, or "
            "default_transaction_read_only = on for the role): every run's reschedule would "
            "fail: point RECUR_DATABASE_URL at the primary")
    if not may_write:
        return StoreUnusable(f"due-jobs store {url}: this role may not INSERT, UPDATE and "
                               "DELETE on due_jobs: every run's reschedule would fail: GRANT "
                               "them, or use the role `recur db upgrade` ran as")
    return None


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at (None before the first upgrade); raises
    :func:`no_usable_schema`'s error instead of None when there is nowhere to upgrade."""
    from sqlalchemy import column, inspect, select, table

    from scheduler.store.hot_sql import CURRENT_SCHEMA

    with translated(f"due-jobs database {engine.url!r}"), engine.connect() as conn:
        if not inspect(conn).has_table(VERSION_TABLE):
            row = (conn.exec_driver_sql(CURRENT_SCHEMA.sql).one()
                   if engine.dialect.name == "postgresql" else None)
            if (nowhere := no_usable_schema(repr(engine.url), row)) is not None:
                raise nowhere
            return None
        query: Any = select(column("version_num")).select_from(table(VERSION_TABLE))
        found = sorted(str(v) for v in conn.execute(query).scalars())  # one: its head
    return ",".join(found) or None


def missing_sqlite_file(engine: Engine) -> Path | None:
    """The SQLite file ``engine`` would create by connecting (None: exists, or not SQLite)."""
    name = engine.url.database
    if engine.dialect.name != "sqlite" or not name or name == ":memory:" or name.startswith(
            "file:"):
        return None
    path = Path(name)
    return None if path.exists() else path


def check_schema(engine: Engine) -> None:
    """Raise SchemaOutOfDate unless the database is at the newest revision.

    Never creates a database: a SQLite file that does not exist is reported as
    such (connecting would create an empty one in the current directory).
    """
    missing = missing_sqlite_file(engine)
    if missing is not None:
        raise SchemaOutOfDate(f"due-jobs store {engine.url}: {missing.resolve()} does not "
                              f"exist: run `recur db upgrade` to create it")
    have, want = current_revision(engine), head_revision()
    if have != want:
        raise SchemaOutOfDate(f"due-jobs schema of {engine.url!r} is at revision "
                              f"{have or 'none'}, this code needs {want}: run `recur db upgrade`")
    if engine.dialect.name == "postgresql":
        from scheduler.store.bulk_indexes import missing_indexes

        with translated(f"due-jobs database {engine.url!r}"), engine.connect() as conn:
            unbuilt = missing_indexes(conn)
        if unbuilt:  # a seed that was stopped before it built them (bulk_indexes.py)
            raise SchemaOutOfDate(f"due-jobs store {engine.url!r} lacks the indexes "
                                  f"{', '.join(unbuilt)}: run `recur db upgrade` to build them")
