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

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from config.errors import SchemaOutOfDate, StoreUnavailable, StoreUnusable
from scheduler.store.connection import translated, unusable_file
from scheduler.store.text_queries import (
    SQLITE_BEGIN,
    SQLITE_ROLLBACK,
    SQLITE_SET_USER_VERSION,
    SQLITE_USER_VERSION,
)

if TYPE_CHECKING:  # SQLAlchemy only where an engine is used: a worker reads head_revision
    from sqlalchemy import Engine

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
#: Our own version table, so another alembic user of the same database cannot collide.
VERSION_TABLE = "recur_schema_version"
_REVISION = re.compile(r"^revision\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", re.MULTILINE)
_DOWN = re.compile(r"^down_revision\s*(?::[^=]*)?=\s*(.*)$", re.MULTILINE)


def _revisions() -> tuple[set[str], set[str]]:
    """Every migration this code knows, and those another migration revises."""
    revisions: set[str] = set()
    revised: set[str] = set()
    for path in (MIGRATIONS / "versions").glob("*.py"):
        text = path.read_text()
        if (found := _REVISION.search(text)) is None:
            continue
        revisions.add(found.group(1))
        if (down := _DOWN.search(text)) is not None:
            revised.update(re.findall(r"['\"]([^'\"]+)['\"]", down.group(1)))
    return revisions, revised


def unknown_revision(url: Any, have: str | None) -> StoreUnusable | None:
    """The error for a store at a revision no migration of this code names (a newer recur
    upgraded it), else None: `recur db upgrade` cannot move it, nor this code run on it."""
    if have is None or set(have.split(",")) <= _revisions()[0]:
        return None
    return StoreUnusable(f"due-jobs schema of {url!r} is at revision {have[:80]}, which this "
                         f"code does not know (a newer recur upgraded it; this code's newest is "
                         f"{head_revision()}): run the recur that upgraded it")


def head_revision() -> str:
    """The newest migration this code knows: the one revision no other revises."""
    revisions, revised = _revisions()
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


def sqlite_file(engine: Engine) -> Path | None:
    """The file of a SQLite ``engine`` named by a plain path (None: not SQLite, in memory,
    or a ``file:`` URI, whose problems SQLite itself reports)."""
    name = engine.url.database
    if engine.dialect.name != "sqlite" or not name or name == ":memory:" or name.startswith(
            "file:"):
        return None
    return Path(name)


def missing_sqlite_file(engine: Engine) -> Path | None:
    """The SQLite file ``engine`` would create by connecting (None: exists, or not SQLite;
    a path that cannot even be looked up is :func:`sqlite_path_problem`'s)."""
    path = sqlite_file(engine)
    try:
        return None if path is None or path.exists() else path
    except OSError:  # a name too long, a loop of links
        return None


#: The longest absolute path SQLite opens: 512 bytes less room for its "-journal" suffix.
SQLITE_LONGEST_PATH = 503


def shown_path(path: Path) -> str:
    """``path`` made absolute (without touching the disk), a very long one shortened."""
    text = os.path.abspath(path)
    return text if len(text) <= 240 else f"{text[:100]}...{text[-100:]}"


def sqlite_path_problem(engine: Engine) -> StoreUnusable | None:
    """The error for a SQLite path no file can be made or opened at (a directory, a
    directory that is missing or read-only, a name too long), else None: SQLite would
    say only "unable to open database file", and `recur db upgrade` cannot help."""
    path = sqlite_file(engine)
    if path is None:
        return None
    try:
        if len(os.fsencode(os.path.abspath(path))) > SQLITE_LONGEST_PATH:
            problem = (f"is longer than SQLite opens ({SQLITE_LONGEST_PATH} bytes, made "
                       "absolute): move the store or use a shorter path")
        elif path.is_dir():
            problem = "is a directory: name a file in it (sqlite:///<dir>/recur.sqlite3)"
        elif not path.parent.is_dir():
            problem = (f"cannot be created: its directory {shown_path(path.parent)} does not "
                       "exist or is not a directory: create it, then `recur db upgrade`")
        elif not path.exists() and not os.access(path.parent, os.W_OK):
            problem = "cannot be created: its directory is read-only"
        elif not os.access(path.parent, os.W_OK) and not Path(f"{path}-shm").exists():
            problem = ("is in a read-only directory: SQLite must create its -wal and -shm "
                       "files beside it")
        else:
            return None
    except OSError as exc:
        problem = f"cannot be looked up: {exc.strerror or exc}"
    return StoreUnusable(f"due-jobs store {shown_path(path)}: {problem}")


@contextmanager
def file_refusals(engine: Engine) -> Iterator[None]:
    """A SQLite file recur cannot use whatever it waits (connection.SQLITE_UNUSABLE) comes
    out as StoreUnusable naming the file; every other error as it was raised."""
    try:
        yield
    except StoreUnavailable as exc:
        problem = unusable_file(exc)
        if problem is None:
            raise
        path = sqlite_file(engine)
        name = shown_path(path) if path is not None else engine.url
        raise StoreUnusable(f"due-jobs store {name} {problem}") from exc


def sqlite_unwritable(engine: Engine) -> StoreUnusable | None:
    """The error for a SQLite store that reads but cannot be written, else None: every
    write of a worker or the scheduler would fail, so they refuse to start. Tried on the
    driver's own connection (whatever the engine's transaction settings): the header's
    user_version written as it is, rolled back. Another writer holding the lock past the
    busy timeout is StoreUnavailable (raised)."""
    if engine.dialect.name != "sqlite":
        return None
    try:
        with file_refusals(engine), translated(f"due-jobs database {engine.url!r}"), \
                engine.connect() as conn:
            raw: Any = conn.connection.dbapi_connection
            version = raw.execute(SQLITE_USER_VERSION).fetchone()[0]
            raw.execute(SQLITE_BEGIN)
            try:
                raw.execute(SQLITE_SET_USER_VERSION.format(version=int(version or 0)))
            finally:
                raw.execute(SQLITE_ROLLBACK)
    except StoreUnusable as exc:
        return exc
    return None


def check_schema(engine: Engine) -> None:
    """Raise SchemaOutOfDate unless the database is at the newest revision; StoreUnusable
    for a SQLite file that cannot be one (:func:`sqlite_path_problem`, :func:`file_refusals`).

    Never creates a database: a SQLite file that does not exist is reported as
    such (connecting would create an empty one in the current directory).
    """
    if (refused := sqlite_path_problem(engine)) is not None:
        raise refused
    missing = missing_sqlite_file(engine)
    if missing is not None:
        raise SchemaOutOfDate(f"due-jobs store {engine.url}: {missing.resolve()} does not "
                              f"exist: run `recur db upgrade` to create it")
    with file_refusals(engine):
        have = current_revision(engine)
    if (newer := unknown_revision(engine.url, have)) is not None:
        raise newer
    want = head_revision()
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
