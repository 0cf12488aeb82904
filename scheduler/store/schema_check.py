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

from config.errors import SchemaOutOfDate
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


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at (None before the first upgrade)."""
    from sqlalchemy import column, inspect, select, table

    with translated(f"due-jobs database {engine.url!r}"), engine.connect() as conn:
        if not inspect(conn).has_table(VERSION_TABLE):
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
