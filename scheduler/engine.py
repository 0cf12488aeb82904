"""SQLAlchemy engines for the due-jobs store: SQLite tuned for one machine, or PostgreSQL.

SQLite runs in WAL mode with a busy timeout (workers and the scheduler write
to one file), and every transaction is ``BEGIN IMMEDIATE`` so a transaction
takes the write lock at its start instead of failing half-way on an upgrade.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, create_engine, event

#: Milliseconds a SQLite writer waits for the lock before giving up.
SQLITE_BUSY_MS = 30_000


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
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_MS}")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine
