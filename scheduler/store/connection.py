"""The one way the due-jobs database is opened, and the one place its drivers' errors
become ours.

SQLite runs in WAL mode with a busy timeout (workers and the scheduler write
to one file), and every transaction is ``BEGIN IMMEDIATE`` so a transaction
takes the write lock at its start instead of failing half-way on an upgrade.
PostgreSQL is opened through SQLAlchemy, or as a plain psycopg connection for
the hot paths (``RawStatements``, the seed's COPY, the fill locks). A
SQLAlchemy, psycopg or sqlite3 error is turned into :class:`StoreUnavailable`
(the database cannot be reached) or :class:`StoreError` by :func:`translated`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import psycopg
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, OperationalError, SQLAlchemyError
from sqlalchemy.pool import NullPool

from config.errors import StoreError, StoreUnavailable, register_driver
from scheduler.store.text_queries import SQLITE_BEGIN, SQLITE_BUSY_MS, SQLITE_SESSION

register_driver(SQLAlchemyError, "due-jobs database")
register_driver(psycopg.Error, "due-jobs database")

#: A direct COPY that meets one of these goes over to the merge (scheduler/store/bulk.py).
KEY_TAKEN = (psycopg.errors.UniqueViolation, psycopg.errors.DeadlockDetected)
#: Two loaders' merges deadlocked (the loser tries again).
DEADLOCK = psycopg.errors.DeadlockDetected
#: A statement waited ``lock_timeout`` for a lock (scheduler/store/fill_lock.py).
LOCK_TIMED_OUT = psycopg.errors.LockNotAvailable
#: The driver errors :func:`translated` turns into ours.
DRIVER_ERRORS = (SQLAlchemyError, psycopg.Error)


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def make_engine(url: str, session_sql: str | None = None) -> Engine:
    """An engine for ``url`` with the per-database settings recur relies on.

    ``session_sql`` (PostgreSQL) runs once on every new connection.
    """
    if not is_sqlite(url):
        # No pre-ping (a round trip per checkout): a connection that broke fails
        # one operation (StoreUnavailable, retried by the caller) and SQLAlchemy
        # then discards the whole pool.
        engine = create_engine(url, pool_size=4, max_overflow=4)
        if session_sql:
            @event.listens_for(engine, "connect")
            def _on_pg_connect(dbapi_conn: Any, _record: Any) -> None:
                dbapi_conn.execute(session_sql)
                dbapi_conn.commit()

        return engine
    engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_MS / 1000})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves, below
        cursor = dbapi_conn.cursor()
        for pragma in SQLITE_SESSION:
            cursor.execute(pragma)
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql(SQLITE_BEGIN)

    return engine


def probe_engine(url: str, timeout: int) -> Engine:
    """An engine that gives up after ``timeout`` seconds and keeps no connection (for a
    check that must never hang nor create anything)."""
    if is_sqlite(url):
        return create_engine(url, poolclass=NullPool)
    return create_engine(url, poolclass=NullPool, connect_args={"connect_timeout": timeout})


def libpq_url(url: str) -> str:
    """The libpq URL of a SQLAlchemy ``postgresql+psycopg://`` URL (options kept)."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def connect_raw(engine: Engine) -> psycopg.Connection[Any]:
    """A new autocommit psycopg connection to ``engine``'s database (the caller closes
    it; wrap the call in :func:`translated`)."""
    cargs, cparams = engine.dialect.create_connect_args(engine.url)
    return psycopg.connect(*cargs, **cparams, autocommit=True)


def connect_url(url: str, application_name: str) -> psycopg.Connection[Any]:
    """A new autocommit psycopg connection to the SQLAlchemy ``url``, named in
    pg_stat_activity (the caller closes it; wrap the call in :func:`translated`)."""
    return psycopg.connect(libpq_url(url), autocommit=True,
                           application_name=application_name)


def is_outage(exc: BaseException) -> bool:
    """The database cannot be reached (or the connection broke), as opposed to a
    statement that failed on a working connection."""
    if isinstance(exc, OperationalError | psycopg.OperationalError):
        return True
    return isinstance(exc, DBAPIError) and exc.connection_invalidated


def translate(exc: BaseException, down: str, failed: str | None = None) -> StoreError:
    """Ours for the driver error ``exc``: StoreUnavailable(``down: exc``) for an outage
    (or for any error when ``failed`` is None), else StoreError(``failed: exc``)."""
    if failed is None or is_outage(exc):
        return StoreUnavailable(f"{down}: {exc}")
    return StoreError(f"{failed}: {exc}")


@contextmanager
def translated(down: str, failed: str | None = None, *,
               on_outage: Callable[[], None] | None = None) -> Iterator[None]:
    """Driver errors raised inside come out as ours (:func:`translate`), ``from`` them;
    ``on_outage`` runs first when it is StoreUnavailable (drop the broken connection)."""
    try:
        yield
    except DRIVER_ERRORS as exc:
        error = translate(exc, down, failed)
        if on_outage is not None and isinstance(error, StoreUnavailable):
            on_outage()
        raise error from exc


def store_errors(url: str, what: str) -> AbstractContextManager[None]:
    """:func:`translated` as the store words it, naming what it was doing."""
    return translated(f"due-jobs store {url}: cannot {what}",
                      f"due-jobs store {url}: {what} failed")
