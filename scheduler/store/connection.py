"""The one way the due-jobs database is opened, and the one place its drivers' errors
become ours.

SQLite runs in WAL mode with a busy timeout (workers and the scheduler write
to one file), and every transaction is ``BEGIN IMMEDIATE`` so a transaction
takes the write lock at its start instead of failing half-way on an upgrade.
PostgreSQL is opened through SQLAlchemy, or as a plain psycopg connection for
the hot paths (``RawStatements``, the seed's COPY, the fill locks). A
SQLAlchemy, psycopg or sqlite3 error is turned into :class:`StoreUnavailable`
(the database cannot be reached) or :class:`StoreError` by :func:`translated`. A
transaction the server rolled back for a concurrent one's sake is run again by
scheduler/store/conflicts.py. Every PostgreSQL connection runs at READ COMMITTED.

SQLAlchemy is imported only when an engine is made: a worker on PostgreSQL settles its
rows on psycopg alone (scheduler/store/worker_store.py) and never loads it (~12 MB per
process). Its errors are recognised once it is loaded (no SQLAlchemy error can be
raised before).
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

from config.errors import StoreError, StoreUnavailable, register_driver
from scheduler.store.text_queries import SQLITE_BEGIN, SQLITE_BUSY_MS, SQLITE_SESSION

if TYPE_CHECKING:
    from sqlalchemy import Engine

register_driver(psycopg.Error, "due-jobs database")
register_driver(sqlite3.Error, "due-jobs database")  # raw, as schema_check's write probe

#: A direct COPY that meets one of these goes over to the merge (scheduler/store/bulk.py).
KEY_TAKEN = (psycopg.errors.UniqueViolation, psycopg.errors.DeadlockDetected)
#: Every PostgreSQL connection recur opens runs at READ COMMITTED (connect_libpq, make_engine).
READ_COMMITTED_LEVEL = "READ COMMITTED"
READ_COMMITTED = "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED"
#: A statement waited ``lock_timeout`` for a lock (scheduler/store/fill_lock.py).
LOCK_TIMED_OUT = psycopg.errors.LockNotAvailable
#: The server ended the session (an InternalError to psycopg): its connection is gone.
SESSION_ENDED = psycopg.errors.IdleInTransactionSessionTimeout
#: SQLSTATE classes of a failed connection or server, not of a statement: 08 connection
#: exception, 53 insufficient resources, 57 operator intervention, 58 system error.
OUTAGE_CLASSES = ("08", "53", "57", "58")


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def load_sqlalchemy() -> None:
    """Import SQLAlchemy now, its errors registered as the database's."""
    from sqlalchemy.exc import SQLAlchemyError

    register_driver(SQLAlchemyError, "due-jobs database")


def is_driver_error(exc: BaseException) -> bool:
    """A psycopg error, or SQLAlchemy's (only once SQLAlchemy is loaded: before, none
    can be raised)."""
    if isinstance(exc, psycopg.Error | sqlite3.Error):
        return True
    loaded = sys.modules.get("sqlalchemy.exc")
    return loaded is not None and isinstance(exc, loaded.SQLAlchemyError)


def make_engine(url: str, session_sql: str | None = None) -> Engine:
    """An engine for ``url`` with the per-database settings recur relies on.

    ``session_sql`` (PostgreSQL) runs once on every new connection.
    """
    load_sqlalchemy()
    from sqlalchemy import create_engine, event

    if not is_sqlite(url):
        # No pre-ping (a round trip per checkout): a connection that broke fails
        # one operation (StoreUnavailable, retried by the caller) and SQLAlchemy
        # then discards the whole pool.
        engine = create_engine(url, pool_size=4, max_overflow=4,
                               isolation_level=READ_COMMITTED_LEVEL)
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
    load_sqlalchemy()
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    if is_sqlite(url):
        return create_engine(url, poolclass=NullPool)
    return create_engine(url, poolclass=NullPool, connect_args={"connect_timeout": timeout})


def libpq_url(url: str) -> str:
    """The libpq URL of a SQLAlchemy ``postgresql+psycopg://`` URL (options kept): the
    same URL with the driver dropped from its scheme."""
    scheme, sep, rest = url.partition("://")
    return f"{scheme.split('+', 1)[0]}{sep}{rest}"


def shown_url(url: str) -> str:
    """``url`` as messages show it: its password as ``***`` (as SQLAlchemy renders it)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user, _, host = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{user.split(':', 1)[0]}:***@{host}"))


def connect_libpq(*cargs: Any, **cparams: Any) -> psycopg.Connection[Any]:
    """A new autocommit psycopg connection (the caller closes it; wrap the call in
    :func:`translated`), at READ COMMITTED whatever the server's, role's or database's
    default: recur's statements wait for a row's lock rather than fail (a REPEATABLE READ
    or SERIALIZABLE default made every concurrent write of one job a serialization error)."""
    conn = psycopg.connect(*cargs, **cparams, autocommit=True)
    try:
        conn.execute(READ_COMMITTED)
    except BaseException:
        conn.close()
        raise
    return conn


def connect_raw(engine: Engine) -> psycopg.Connection[Any]:
    """A new autocommit psycopg connection to ``engine``'s database (:func:`connect_libpq`)."""
    cargs, cparams = engine.dialect.create_connect_args(engine.url)
    return connect_libpq(*cargs, **cparams)


def connect_url(url: str, application_name: str) -> psycopg.Connection[Any]:
    """A new autocommit psycopg connection to the SQLAlchemy ``url``, named in
    pg_stat_activity (:func:`connect_libpq`)."""
    return connect_libpq(libpq_url(url), application_name=application_name)


def is_outage(exc: BaseException) -> bool:
    """The database cannot be reached (or the connection broke), as opposed to a
    statement that failed on a working connection."""
    if isinstance(exc, psycopg.OperationalError | SESSION_ENDED | sqlite3.OperationalError):
        return True
    loaded = sys.modules.get("sqlalchemy.exc")
    if loaded is None:
        return False
    return isinstance(exc, loaded.OperationalError) or (
        isinstance(exc, loaded.DBAPIError) and (exc.connection_invalidated
                                                or isinstance(exc.orig, SESSION_ENDED)))


#: What libpq or the server says of a connection refused for the URL's own settings (its
#: options, sslmode, credentials), unlike a server that is down, starting or full: waiting
#: does not help. libpq gives such errors no SQLSTATE, so their text tells them apart.
REFUSED_SETTINGS = ("requires a value", "unrecognized configuration parameter",
                    "invalid value for parameter", "server does not support SSL",
                    "invalid sslmode value", "invalid connection option",
                    "invalid URI query parameter", "password authentication failed",
                    "no pg_hba.conf entry")


def refused_settings(exc: BaseException) -> bool:
    """Whether ``exc`` (ours, from a driver error) is a connection refused for the URL's
    settings (:data:`REFUSED_SETTINGS`), not an outage to wait out."""
    cause = getattr(exc.__cause__, "orig", exc.__cause__)
    if not isinstance(cause, psycopg.Error) or cause.sqlstate is not None:
        return False
    text = " ".join(str(cause).split())
    return any(fragment in text for fragment in REFUSED_SETTINGS)


#: SQLite's errors about the file itself (by the start of their error name), and what
#: each says is wrong with it: waiting does not help, as it does for SQLITE_BUSY (another
#: writer holds the lock), SQLITE_FULL (no space left) or SQLITE_IOERR.
SQLITE_UNUSABLE = (
    ("SQLITE_NOTADB", "is not a SQLite database (another program's file, or not a store)"),
    ("SQLITE_CORRUPT", "is corrupt (a truncated or damaged copy): restore it from a backup"),
    ("SQLITE_CANTOPEN", "cannot be opened (a directory, a missing or read-only directory, "
                        "or a name too long)"),
    ("SQLITE_READONLY", "is read-only (it or its -wal or -shm file is immutable or "
                        "read-only, on a read-only mount, or opened with mode=ro)"))


def unusable_file(exc: BaseException) -> str | None:
    """What is wrong with the SQLite file, when ``exc`` (ours, from a driver error) is one
    of :data:`SQLITE_UNUSABLE`; None for any other error."""
    cause = getattr(exc.__cause__, "orig", exc.__cause__)
    name = str(getattr(cause, "sqlite_errorname", ""))
    return next((problem for prefix, problem in SQLITE_UNUSABLE if name.startswith(prefix)),
                None)


def rows_refused(exc: BaseException) -> bool:
    """Whether a failed write was refused for what its rows hold (a key too long for its
    index, a constraint, a deadlock), not because the database or the connection failed:
    a batch refused so is worth writing again row by row. A row PostgreSQL refuses as
    a "program limit" is translated as an outage (StoreUnavailable, its class is
    psycopg's OperationalError): its SQLSTATE tells it apart."""
    if not isinstance(exc, StoreUnavailable):
        return True
    cause = getattr(exc.__cause__, "orig", exc.__cause__)
    state = str(getattr(cause, "sqlstate", None) or "")
    return (isinstance(cause, psycopg.Error) and not isinstance(cause, SESSION_ENDED)
            and bool(state) and state[:2] not in OUTAGE_CLASSES)


def driver_text(exc: BaseException) -> str:
    """``exc`` as one line: psycopg's primary message (not the statement it quotes), a
    SQLAlchemy error as its driver's error and that message, without the statement, its
    parameters and the background link SQLAlchemy appends (a batch's parameters made a
    "line" of kilobytes)."""
    orig = getattr(exc, "orig", None)
    if isinstance(exc, psycopg.Error):  # its primary message, without "LINE 1: <SQL>"
        return exc.diag.message_primary or " ".join(str(exc).split())
    if orig is None or not is_driver_error(exc):
        return str(exc)
    cls = type(orig)
    primary = orig.diag.message_primary if isinstance(orig, psycopg.Error) else None
    return f"({cls.__module__}.{cls.__name__}) {primary or ' '.join(str(orig).split())}"


def translate(exc: BaseException, down: str, failed: str | None = None) -> StoreError:
    """Ours for the driver error ``exc``: StoreUnavailable(``down: exc``) for an outage
    (or for any error when ``failed`` is None), else StoreError(``failed: exc``)."""
    if failed is None or is_outage(exc):
        return StoreUnavailable(f"{down}: {driver_text(exc)}")
    return StoreError(f"{failed}: {driver_text(exc)}")


@contextmanager
def translated(down: str, failed: str | None = None, *,
               on_outage: Callable[[], None] | None = None) -> Iterator[None]:
    """Driver errors raised inside come out as ours (:func:`translate`), ``from`` them;
    ``on_outage`` runs first when it is StoreUnavailable (drop the broken connection)."""
    try:
        yield
    except Exception as exc:
        if not is_driver_error(exc):
            raise
        error = translate(exc, down, failed)
        if on_outage is not None and isinstance(error, StoreUnavailable):
            on_outage()
        raise error from exc


def store_errors(url: str, what: str) -> AbstractContextManager[None]:
    """:func:`translated` as the store words it, naming what it was doing."""
    return translated(f"due-jobs store {url}: cannot {what}",
                      f"due-jobs store {url}: {what} failed")
