"""The hot path's statements: compiled once for PostgreSQL, run on a few psycopg connections.

SQLAlchemy's per-execution work was most of a worker's cost per job and a third
of the drain's, so the worker's per-job statements and the scheduler's dispatch
run here instead; everything else goes through the engine. A worker's statements
come as text (hot_sql.py) and need no SQLAlchemy at all; any other statement is
compiled on first use by the dialect it was given (SQLAlchemy's, loaded then).
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from config.errors import StoreUnavailable
from scheduler.store.conflicts import rerun_conflicts
from scheduler.store.connection import translated
from scheduler.store.hot_sql import HotSql
from scheduler.store.text_queries import DURABLE_TRANSACTION, SETTLE_SESSION

#: A statement: hot_sql's text, or a SQLAlchemy one (queries.Statement), compiled once.
Statement = HotSql | Any
#: Runs one statement in a transaction: (statement, parameters) → rows.
Run = Callable[[Statement, dict[str, Any]], list[tuple[Any, ...]]]


class RawStatements:
    """Statements compiled once for PostgreSQL, run on a small pool of psycopg connections.

    A thread takes a connection for one statement (or one transaction) and gives
    it back: a threads-pool worker runs hundreds of tasks at once, and a
    connection per thread would exhaust PostgreSQL's max_connections (100 by
    default); a few connections carry them all (each statement is one round trip).
    """

    #: Connections one store opens at most; threads beyond wait for a free one.
    MAX_CONNECTIONS = 8
    #: Seconds a thread waits for a free connection before the store counts as down.
    CHECKOUT_TIMEOUT = 30.0

    def __init__(self, connect: Callable[[], psycopg.Connection[Any]], url: str,
                 dialect: Any = None) -> None:
        self.url = url
        self._connect = connect
        self._dialect = dialect
        self._compiled: dict[int, tuple[str, dict[str, Any]]] = {}
        self._free: queue.LifoQueue[psycopg.Connection[Any]] = queue.LifoQueue()
        self._all: list[psycopg.Connection[Any]] = []
        self._lock = threading.Lock()
        #: Connections found broken so far (the settle journal writes again after one).
        self.broken = 0
        # A store dropped without close() still closes its connections.
        weakref.finalize(self, _close_all, self._all)

    def _sql(self, stmt: Statement) -> tuple[str, dict[str, Any]]:
        if isinstance(stmt, HotSql):
            return stmt.sql, stmt.defaults
        if id(stmt) not in self._compiled:
            if self._dialect is None:  # a SQLAlchemy statement on a worker's store
                from sqlalchemy.dialects.postgresql.psycopg import dialect

                self._dialect = dialect()  # type: ignore[no-untyped-call]
            compiled = stmt.compile(dialect=self._dialect)
            self._compiled[id(stmt)] = (str(compiled), dict(compiled.params))
        return self._compiled[id(stmt)]

    def _open(self) -> psycopg.Connection[Any]:
        conn = self._connect()
        conn.execute(SETTLE_SESSION)
        return conn

    def _checkout(self, what: str) -> psycopg.Connection[Any]:
        """A free connection, a new one while fewer than MAX_CONNECTIONS are open, or
        the next one given back."""
        try:
            conn = self._free.get_nowait()
        except queue.Empty:
            with self._lock:
                grow = len(self._all) < self.MAX_CONNECTIONS
                if grow:
                    conn = self._open()  # OperationalError: the caller wraps it
                    self._all.append(conn)
            if not grow:
                try:
                    conn = self._free.get(timeout=self.CHECKOUT_TIMEOUT)
                except queue.Empty:
                    raise StoreUnavailable(f"due-jobs store {self.url}: cannot {what}: no "
                                           f"free connection in {self.CHECKOUT_TIMEOUT:g}s"
                                           ) from None
        if conn.closed:
            self._discard(conn)
            return self._checkout(what)
        return conn

    def _discard(self, conn: psycopg.Connection[Any]) -> None:
        """Drop a broken connection (a new one is opened when needed)."""
        with self._lock:
            self.broken += 1
            if conn in self._all:
                self._all.remove(conn)
        conn.close()

    @contextmanager
    def _connection(self, what: str) -> Iterator[psycopg.Connection[Any]]:
        """A connection for one statement or transaction; psycopg errors become ours (a
        broken connection is dropped)."""
        conn = None

        def broken() -> None:
            nonlocal conn
            # A statement the server canceled (statement_timeout, lock_timeout) is retried
            # as an outage, but its connection is sound: kept, and no "connection broke".
            if conn is not None and (conn.closed or conn.broken or conn.info.transaction_status
                                     != psycopg.pq.TransactionStatus.IDLE):
                self._discard(conn)
                conn = None

        try:
            with translated(f"due-jobs store {self.url}: cannot {what}",
                            f"due-jobs store {self.url}: {what} failed", on_outage=broken):
                conn = self._checkout(what)
                yield conn
        finally:
            if conn is not None:
                self._free.put(conn)

    def execute(self, what: str, stmt: Statement, params: dict[str, Any]) -> tuple[Any, int]:
        """One autocommitted statement: (its first row or None, its rowcount); run again
        if the server rolled it back for a concurrent writer (connection.py)."""
        sql, defaults = self._sql(stmt)

        def once() -> tuple[Any, int]:
            with self._connection(what) as conn:
                cur = conn.execute(sql, {**defaults, **params})
                return (cur.fetchone() if cur.description else None), cur.rowcount
        return rerun_conflicts(once)

    def execute_many(self, what: str, stmt: Statement, rows: list[dict[str, Any]]) -> None:
        """``stmt`` for each of ``rows`` in one durable transaction (psycopg pipelines
        them: one round trip). One row is executed plainly: a pipeline waits for the
        socket to be readable or writable, and it is always writable, so the wait for the
        commit's answer polls in a loop (~80 µs of client CPU a call, measured). Run
        again if the server rolled it back for a concurrent writer (connection.py)."""
        sql, defaults = self._sql(stmt)

        def once() -> None:
            with self._connection(what) as conn, conn.transaction():
                conn.execute(DURABLE_TRANSACTION)
                if len(rows) == 1:
                    conn.execute(sql, {**defaults, **rows[0]})
                else:
                    conn.cursor().executemany(sql, [{**defaults, **row} for row in rows])
        rerun_conflicts(once)

    @contextmanager
    def transaction(self, what: str) -> Iterator[Run]:
        """A durable transaction on one connection: yields ``run(stmt, params)``
        returning the rows (the per-job statements' ``synchronous_commit off`` is
        switched back on for it)."""
        with self._connection(what) as conn:
            def run(stmt: Statement, params: dict[str, Any]) -> list[tuple[Any, ...]]:
                sql, defaults = self._sql(stmt)
                cur = conn.execute(sql, {**defaults, **params})
                return cur.fetchall() if cur.description else []

            with conn.transaction():
                conn.execute(DURABLE_TRANSACTION)
                yield run

    def close(self) -> None:
        with self._lock:
            _close_all(self._all)
        while not self._free.empty():
            self._free.get_nowait()


def _close_all(connections: list[psycopg.Connection[Any]]) -> None:
    for conn in connections:
        conn.close()
    connections.clear()
