"""What every part of the store shares: its engine, a public transaction, task names.

``StoreCore`` opens nothing itself (``DueStore.open`` does): it holds one
engine, and on PostgreSQL the hot path's psycopg pool and its settle journal.
The operators' statements (control.py), the dead-letter sweep's (dead.py) and
the set-aside rows' (aside.py) run through :meth:`StoreCore.transaction`.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine

from scheduler.refusals import Refusal
from scheduler.store import hot_sql
from scheduler.store.conflicts import rerun_conflicts
from scheduler.store.connection import (
    connect_raw,
    load_sqlalchemy,
    store_errors,
)
from scheduler.store.journal import SettleJournal
from scheduler.store.queries import (
    JOURNALED,
    RECORD_SET_ASIDE,
    SET_ASIDE_ROW,
    TASK_CODES,
    Statement,
    bump_counters,
    register_tasks,
)
from scheduler.store.raw_pool import RawStatements
from scheduler.store.records import MAX_REASON, Claimed, Execute

load_sqlalchemy()  # its errors are the database's from now on (connection.py)
#: Statements whose writes the settle journal keeps (either form of each).
_JOURNALED = (*JOURNALED, *hot_sql.JOURNALED)


def task_codes(conn: Connection, names: Iterable[str]) -> dict[str, int]:
    """Every registered task name's code, after registering ``names`` that are new."""
    known = {str(n): int(c) for c, n in conn.execute(TASK_CODES)}
    new = sorted(set(names) - known.keys())
    if new:
        conn.execute(register_tasks(conn.dialect.name), [{"name": n} for n in new])
        known = {str(n): int(c) for c, n in conn.execute(TASK_CODES)}
    return known


class StoreCore:
    """One due-jobs database: its engine, transactions and task names."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.url = engine.url.render_as_string(hide_password=True)
        self.dialect = engine.dialect.name
        self._raw = RawStatements(lambda: connect_raw(engine), self.url, engine.dialect
                                  ) if self.dialect == "postgresql" else None
        self._journal = None if self._raw is None else SettleJournal(
            self._raw.execute, self._server_started)
        # Task name <-> code; a code never changes once given, so caching is safe.
        self._codes: dict[str, int] = {}
        self._names: dict[int, str] = {}
        # A store dropped without close() still returns its pooled connections.
        weakref.finalize(self, engine.dispose)

    def close(self) -> None:
        self.engine.dispose()
        if self._raw is not None:
            self._raw.close()
        if self._journal is not None:
            self._journal.close()

    def discard_connections(self) -> None:
        """Drop every pooled connection (after an outage they are all broken): the
        next statement of each lane opens a fresh one, instead of each stale one
        failing once more."""
        self.close()

    def _server_started(self) -> Any:
        """The server's identity for the settle journal: its start and statistics reset
        times, and this process's broken connections (a restart, a crash recovery or a
        broken connection changes it)."""
        assert self._raw is not None
        row, _ = self._raw.execute("read the server's start time", hot_sql.SERVER_STARTED, {})
        return (*row, self._raw.broken)

    @contextmanager
    def transaction(self, what: str) -> Iterator[Connection]:
        """One durable transaction; driver errors come out as ours, naming ``what``."""
        with store_errors(self.url, what), self.engine.begin() as conn:
            yield conn

    def _settle(self, what: str, stmt: Statement | hot_sql.HotSql, params: dict[str, Any]
                ) -> tuple[Any, int]:
        """Run one of a worker's per-job statements: (first row or None, rowcount).

        On PostgreSQL it runs on this thread's own psycopg connection, compiled
        once, autocommitted, with ``synchronous_commit off``: SQLAlchemy's
        per-execution work and the wait for the WAL flush were most of a
        worker's cost per job. Not waiting for the flush is safe here because
        every such write is kept by this process for a few seconds and written
        again if the server crashed meanwhile (scheduler/store/journal.py), and
        behind that is the row's lease: a crash that loses one leaves the row
        dispatched, never a lost job. Producers' schedules and the scheduler's
        dispatches stay fully durable.
        """
        if self._raw is None:
            assert not isinstance(stmt, hot_sql.HotSql), "hot_sql is PostgreSQL's"
            with self.transaction(what) as conn:
                result = conn.execute(stmt, params)
                return (result.first() if result.returns_rows else None), result.rowcount
        if not any(stmt is journaled for journaled in _JOURNALED):
            return self._raw.execute(what, stmt, params)
        assert self._journal is not None
        self._journal.before_write()
        done = self._raw.execute(what, stmt, params)
        self._journal.record(what, stmt, params)
        return done

    # -- task names --------------------------------------------------------------

    def _task_codes(self, names: Iterable[str]) -> dict[str, int]:
        """Every known task name's code, with ``names`` registered if new.

        Registration commits on its own, before the rows that use the code:
        a code in the cache is always one the table holds.
        """
        if any(name not in self._codes for name in names):
            def register() -> None:
                with self.transaction("register task names") as conn:
                    self._remember(task_codes(conn, names))
            rerun_conflicts(register)  # two processes' first calls register at once
        return self._codes

    def _remember(self, codes: dict[str, int]) -> None:
        """Cache every registered name → code, and the reverse."""
        self._codes = codes
        self._names = {code: name for name, code in codes.items()}

    def _names_of(self, codes: set[int]) -> dict[int, str]:
        """Code → task name for ``codes``, re-read when another process added one."""
        if not codes <= self._names.keys():
            with self.transaction("read task names") as conn:
                self._remember(task_codes(conn, ()))
        return self._names

    def task_name(self, conn: Connection, code: int) -> str:
        """The name of task ``code``, re-read on ``conn`` when another process added it
        ("" for a code no name has: a row another writer made; it is set aside)."""
        if code not in self._names:
            self._remember(task_codes(conn, ()))
        return self._names.get(code, "")

    # -- writes the scheduler's transactions share ----------------------------------

    def put_aside(self, execute: Execute, refused: list[tuple[Claimed, Refusal]],
                  now: datetime) -> None:
        """Set ``refused`` rows aside with their reasons, in the caller's transaction
        (the rows are locked by it)."""
        record = RECORD_SET_ASIDE[self.dialect]
        for row, refusal in refused:
            execute(SET_ASIDE_ROW, {"key": row.job_key, "now": now})
            execute(record, {"key": row.job_key, "bucket": row.bucket, "now": now,
                             "reason": refusal.reason[:MAX_REASON]})

    def add_counters(self, conn: Connection, name: str, counts: Counter[str]) -> None:
        """Add ``counts`` to the per-bucket running total ``name``, in ``conn``'s
        transaction."""
        conn.execute(bump_counters(self.dialect),
                     [{"bucket": b, "name": name, "value": n} for b, n in counts.items()])
