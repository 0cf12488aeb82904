"""The store a worker process settles its rows with: psycopg alone on PostgreSQL.

A worker's every store call is one of a few statements: a run's token check, its
reschedule, finish or lease move, and the upsert of a call a task stores
(``apply_async`` with a long delay). On PostgreSQL :class:`WorkerStore` runs them
as hot_sql.py's text on raw_pool.py's connections, exactly as ``DueStore`` runs
them there (same statements, same settle journal, same error translation), but
without SQLAlchemy, which was ~12 MB of every worker process. SQLite, and any
other store call (``apply_many``, a result's or a cancel's read), use the full
``DueStore`` (core.py), imported on first need.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

import psycopg

from config.errors import SchemaOutOfDate, StoreUnavailable, StoreUnusable
from scheduler.store import hot_sql
from scheduler.store.conflicts import rerun_conflicts
from scheduler.store.connection import connect_libpq, is_sqlite, libpq_url, shown_url
from scheduler.store.raw_pool import RawStatements
from scheduler.store.records import Job
from scheduler.store.settle_batch import RawStore, live_of

if TYPE_CHECKING:
    from scheduler.store.journal import SettleJournal


class SettleStore(RawStore, Protocol):
    """The calls a worker makes (DueStore has them all, so does WorkerStore)."""

    url: str

    def live_dispatch(self, job_key: str, *, wait: bool = True
                      ) -> tuple[int, datetime | None] | None: ...

    def reschedule(self, job_key: str, token: int, due_at: datetime, now: datetime,
                   args: str | None = None, early_at: datetime | None = None) -> bool: ...

    def finish(self, job_key: str, token: int) -> bool: ...

    def set_lease(self, job_key: str, token: int, until: datetime) -> bool: ...

    def schedule(self, jobs: Sequence[Job], now: datetime) -> None: ...


class WorkerStore:
    """A worker's PostgreSQL store: DueStore's worker calls, on psycopg alone."""

    dialect = "postgresql"

    def __init__(self, url: str) -> None:
        from scheduler.store.journal import SettleJournal  # its metrics: once a store opens

        self.url = shown_url(url)
        self._libpq = libpq_url(url)
        self._raw: RawStatements | None = RawStatements(self._connect, self.url)
        self._journal: SettleJournal | None = SettleJournal(self._raw.execute,
                                                            self._server_started)
        self._codes: dict[str, int] = {}

    @classmethod
    def open(cls, url: str) -> WorkerStore:
        """Connect to ``url``; refuse a schema that is not at this code's revision."""
        store = cls(url)
        store.check_schema()
        return store

    def _connect(self) -> psycopg.Connection[Any]:
        return connect_libpq(self._libpq)

    def _run(self) -> RawStatements:
        assert self._raw is not None
        return self._raw

    def check_schema(self) -> None:
        """schema_check.py's revision check, on psycopg (a worker does not check the
        seed's indexes: the scheduler refuses to start without them)."""
        from scheduler.store.schema_check import VERSION_TABLE, head_revision, no_usable_schema

        with self._run().transaction("read the schema revision") as run:
            present = run(hot_sql.TABLE_EXISTS, {"table": VERSION_TABLE})[0][0]
            rows = run(hot_sql.SCHEMA_REVISION, {}) if present else []
            where = None if present else run(hot_sql.CURRENT_SCHEMA, {})[0]
        if (nowhere := no_usable_schema(self.url, where)) is not None:
            raise nowhere
        have, want = ",".join(sorted(str(r[0]) for r in rows)) or None, head_revision()
        if have != want:
            raise SchemaOutOfDate(f"due-jobs schema of {self.url} is at revision "
                                  f"{have or 'none'}, this code needs {want}: run "
                                  "`recur db upgrade`")

    def _server_started(self) -> Any:
        """The server's identity for the settle journal (as StoreCore's)."""
        row, _ = self._run().execute("read the server's start time", hot_sql.SERVER_STARTED,
                                     {})
        return (*row, self._run().broken)

    def _settle(self, what: str, stmt: hot_sql.HotSql, params: dict[str, Any]
                ) -> tuple[Any, int]:
        """One per-job statement, kept by the settle journal if it is a write (as
        StoreCore._settle on PostgreSQL)."""
        if not any(stmt is journaled for journaled in hot_sql.JOURNALED):
            return self._run().execute(what, stmt, params)
        assert self._journal is not None
        self._journal.before_write()
        done = self._run().execute(what, stmt, params)
        self._journal.record(what, stmt, params)
        return done

    def live_dispatch(self, job_key: str, *, wait: bool = True
                      ) -> tuple[int, datetime | None] | None:
        """DueStore.live_dispatch: (token, lease end) of the dispatched row, else None."""
        stmt = hot_sql.LIVE_DISPATCH if wait else hot_sql.PEEK_DISPATCH
        return live_of(self._settle("read a job's token", stmt, {"key": job_key})[0])

    def reschedule(self, job_key: str, token: int, due_at: datetime, now: datetime,
                   args: str | None = None, early_at: datetime | None = None) -> bool:
        """DueStore.reschedule: token-checked (False: a stale copy)."""
        _, count = self._settle("reschedule a job", hot_sql.RESCHEDULE, {
            "key": job_key, "current": token, "due": due_at, "now": now, "new_args": args,
            "early": early_at or hot_sql.NO_FLOOR})
        return count == 1

    def finish(self, job_key: str, token: int) -> bool:
        """DueStore.finish: token-checked delete (False: a stale copy)."""
        _, count = self._settle("finish a job", hot_sql.FINISH,
                                {"key": job_key, "current": token})
        return count == 1

    def set_lease(self, job_key: str, token: int, until: datetime) -> bool:
        """DueStore.set_lease: token-checked (False: stale)."""
        _, count = self._settle("set a job's lease", hot_sql.SET_LEASE, {
            "key": job_key, "current": token, "lease": until, "now": datetime.now(UTC)})
        return count == 1

    def schedule(self, jobs: Sequence[Job], now: datetime) -> None:
        """DueStore.schedule: upsert ``jobs`` by key, in one durable transaction."""
        if not jobs:
            return
        codes = self._task_codes({j.task for j in jobs})
        self._run().execute_many("schedule jobs", hot_sql.UPSERT_JOB, [
            {"job_key": j.job_key, "task_id": codes[j.task], "bucket": j.bucket,
             "args": j.args, "due_at": j.due_at, "early_at": j.early_at or hot_sql.NO_FLOOR,
             "created_at": now, "updated_at": now} for j in jobs])

    def _task_codes(self, names: Iterable[str]) -> dict[str, int]:
        """Every known task name's code, ``names`` registered first if new (committed
        before the rows that use them, as base.task_codes)."""
        if any(name not in self._codes for name in names):
            def register() -> None:
                with self._run().transaction("register task names") as run:
                    known = {str(n): int(c) for c, n in run(hot_sql.TASK_CODES, {})}
                    for name in sorted(set(names) - known.keys()):
                        run(hot_sql.REGISTER_TASK, {"name": name})
                    self._codes = {str(n): int(c) for c, n in run(hot_sql.TASK_CODES, {})}
            rerun_conflicts(register)  # two processes' first calls register at once
        return self._codes

    def close(self) -> None:
        self._run().close()
        if self._journal is not None:
            self._journal.close()

    def discard_connections(self) -> None:
        """Drop every connection (after an outage they are all broken)."""
        self.close()


_stores: dict[tuple[int, str], WorkerStore] = {}


def get_worker_store(url: str) -> SettleStore:
    """This process's store for a worker's calls on ``url`` (a forked child opens its
    own): a WorkerStore on PostgreSQL, DueStore (core.py's ``get_store``) on SQLite."""
    if is_sqlite(url):
        from scheduler.store.core import get_store

        try:
            return get_store(url)
        except StoreUnusable as exc:  # the file broke after the start (checked then): to
            if isinstance(exc, SchemaOutOfDate):  # a run an outage, ridden out, handed back
                raise
            raise StoreUnavailable(str(exc)) from exc
    key = (os.getpid(), url)
    if key not in _stores:
        _stores[key] = WorkerStore.open(url)
    return _stores[key]


def check_store_at_start(url: str) -> str | None:
    """Raise StoreUnusable for a store a worker cannot run against (another schema revision,
    no usable schema, a role that cannot write), StoreUnavailable if it cannot be reached;
    a warning when there is no store at all (a SQLite file, or its directory, that is not
    there: a worker that never runs a stored job needs none, and nothing here creates it).
    Connections are closed again: a prefork pool forks after this."""
    if is_sqlite(url):
        from scheduler.store.core import DueStore
        from scheduler.store.schema_check import (
            check_schema,
            missing_sqlite_file,
            sqlite_path_problem,
            sqlite_unwritable,
        )

        store = DueStore.open(url, check=False)
        try:
            missing = missing_sqlite_file(store.engine)
            problem = sqlite_path_problem(store.engine)
            if missing is not None and (problem is None or not missing.parent.is_dir()):
                return (f"{problem}: this worker fails every stored job's run until then"
                        if problem is not None else  # no store yet, nor its directory
                        f"due-jobs store {url}: {missing.resolve()} does not exist: this "
                        "worker fails every stored job's run until `recur db upgrade` "
                        "creates it")
            check_schema(store.engine)
            if (refused := sqlite_unwritable(store.engine)) is not None:
                raise refused
        finally:
            store.close()
        return None
    from scheduler.store.schema_check import unwritable

    worker_store = WorkerStore(url)
    try:
        worker_store.check_schema()
        row, _ = worker_store._run().execute("check the store is writable",
                                             hot_sql.STORE_WRITABLE, {})
        if (refused := unwritable(worker_store.url, row)) is not None:
            raise refused
    finally:
        worker_store.close()
    return None


def close_worker_stores() -> None:
    """Close every store :func:`get_worker_store` opened in this process."""
    for store in _stores.values():
        store.close()
    _stores.clear()
