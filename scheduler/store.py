"""The due-jobs store: every statement against the due-jobs tables lives here.

A row is one job key: scheduled (waiting for ``due_at``) → dispatched (published,
with a new token, ``due_at`` now the end of its lease) → scheduled again when
its task reschedules it (only if the token still matches), or deleted when it
finishes for good. A row whose lease runs out goes back to scheduled, due at
once, and is dispatched again with a new token, so a stale copy can be
recognised by its token. Rows name their task by a code (``due_tasks``).

On PostgreSQL several schedulers claim rows with ``FOR UPDATE SKIP LOCKED``;
on SQLite every transaction holds the one write lock (``BEGIN IMMEDIATE``).
Driver errors come out as :class:`StoreUnavailable` or :class:`StoreError`.
"""

from __future__ import annotations

import os
import queue
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from sqlalchemy import (
    Connection,
    Engine,
    Insert,
    Text,
    and_,
    any_,
    bindparam,
    case,
    delete,
    func,
    select,
    type_coerce,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError, OperationalError, SQLAlchemyError
from sqlalchemy.sql import Delete, Select, Update, column, table

from config.errors import StoreError, StoreUnavailable
from scheduler.engine import make_engine
from scheduler.migrate import check_schema
from scheduler.periodic import PeriodicEntry, next_run
from scheduler.refusals import Published, Refusal
from scheduler.schema import (
    DISPATCHED,
    NO_FLOOR,
    SCHEDULED,
    SET_ASIDE,
    UtcDateTime,
    due_counters,
    due_jobs,
    due_set_aside,
    due_tasks,
    periodic_entries,
)
from scheduler.store_journal import SettleJournal

#: Counter of rows whose lease ran out and that were put back to be dispatched again.
RECOVERED = "leases_recovered"
#: Counter of poison jobs moved to their dead-letter queue (out of attempts).
DEAD_LETTERED = "dead_lettered"


@dataclass(frozen=True)
class Job:
    """A job to schedule: ``args`` is JSON text ``{"args": [...], "kwargs": {...}}``."""

    job_key: str
    task: str
    bucket: str
    args: str
    due_at: datetime
    #: The pull-forward floor (scheduler/pullforward.py); None: no floor.
    early_at: datetime | None = None


@dataclass(frozen=True)
class Claimed:
    """A row claimed for dispatch: its message carries ``token`` and ``lease_until``.

    The token alone can repeat: a dispatch whose transaction rolled back after
    publishing (scheduler killed, confirm lost) leaves copies with the token
    the next dispatch gives again. The lease stamp differs, so the pair
    identifies one dispatch.
    """

    job_key: str
    task: str
    bucket: str
    args: str
    due_at: datetime
    token: int
    lease_until: datetime
    #: Dispatches without a finish or reschedule (set for dead-lettered rows).
    attempts: int = 0


Statement = Select[Any] | Update | Delete
# The worker's per-job statements, named by what they do.
# peek_dispatch: is this message the row's current copy? (last committed state)
# live_dispatch: the same, but FOR SHARE waits for a scheduler still committing
# the dispatch of this very message (it publishes before it commits), then reads
# the committed row. The state is tested by the caller, not in WHERE: PostgreSQL
# would filter on the old row version and never wait.
PEEK_DISPATCH = select(due_jobs.c.token, due_jobs.c.due_at, due_jobs.c.state).where(
    due_jobs.c.job_key == bindparam("key"))
LIVE_DISPATCH = PEEK_DISPATCH.with_for_update(read=True)
# reschedule_job: token-checked dispatched → scheduled (new args only if given),
# with its pull-forward floor, one more run counted.
RESCHEDULE = update(due_jobs).where(
    due_jobs.c.job_key == bindparam("key"), due_jobs.c.token == bindparam("current"),
    due_jobs.c.state == DISPATCHED,
).values(state=SCHEDULED, due_at=bindparam("due", type_=UtcDateTime()), attempts=0,
         early_at=bindparam("early", type_=UtcDateTime()), runs=due_jobs.c.runs + 1,
         updated_at=bindparam("now", type_=UtcDateTime()),
         args=func.coalesce(bindparam("new_args", type_=Text()), due_jobs.c.args))
# finish_job: token-checked delete of a one-shot job.
FINISH = delete(due_jobs).where(
    due_jobs.c.job_key == bindparam("key"), due_jobs.c.token == bindparam("current"),
    due_jobs.c.state == DISPATCHED)
# set_lease: move the end of the live dispatch's lease (token-checked), so a
# failed run's row is due again in seconds instead of after the whole lease. A
# lease already there counts as no change (a settle journal's replay of it too).
SET_LEASE = update(due_jobs).where(
    due_jobs.c.job_key == bindparam("key"), due_jobs.c.token == bindparam("current"),
    due_jobs.c.state == DISPATCHED,
    due_jobs.c.due_at != bindparam("lease", type_=UtcDateTime()),
).values(due_at=bindparam("lease", type_=UtcDateTime()),
         updated_at=bindparam("now", type_=UtcDateTime()))
# The scheduler's statements. claim_rows: the earliest due scheduled rows of
# one bucket (ix_due_jobs_scheduled), skipping rows another scheduler holds.
# claim_early (idle pull-forward): the scheduled rows whose floor has passed,
# those that became eligible first (rows that never ran: earliest due first):
# one range of ix_due_jobs_early, whatever the population. Ordering every
# eligible row by due time instead would sort up to the whole bucket each pass.
_CLAIM = (select(due_jobs.c.job_key, due_jobs.c.task_id, due_jobs.c.args, due_jobs.c.due_at,
                 due_jobs.c.token)
          .limit(bindparam("limit")).with_for_update(skip_locked=True))
_SCHEDULED_OF = (due_jobs.c.bucket == bindparam("bucket"), due_jobs.c.state == SCHEDULED)
_NOW = bindparam("now", type_=UtcDateTime())
CLAIM_DUE = _CLAIM.where(*_SCHEDULED_OF, due_jobs.c.due_at <= _NOW).order_by(due_jobs.c.due_at)
CLAIM_EARLY = _CLAIM.where(*_SCHEDULED_OF, due_jobs.c.early_at <= _NOW).order_by(
    due_jobs.c.early_at, due_jobs.c.due_at)
# mark_dispatched: new token, due again when the lease ends, one more attempt.
MARK_DISPATCHED = update(due_jobs).where(
    due_jobs.c.job_key == any_(bindparam("keys", type_=postgresql.ARRAY(Text()))),
).values(state=DISPATCHED, token=due_jobs.c.token + 1,
         due_at=bindparam("lease", type_=UtcDateTime()), attempts=due_jobs.c.attempts + 1,
         updated_at=bindparam("now", type_=UtcDateTime()))


# set_aside_row: a row the broker cannot take leaves every index (state 2), and
# record_set_aside says why (one row each: setting rows aside is rare).
SET_ASIDE_ROW = update(due_jobs).where(due_jobs.c.job_key == bindparam("key")).values(
    state=SET_ASIDE, updated_at=bindparam("now", type_=UtcDateTime()))


def _record_set_aside(module: Any) -> Any:
    stmt = module.insert(due_set_aside).values(
        job_key=bindparam("key"), bucket=bindparam("bucket"), reason=bindparam("reason"),
        set_at=bindparam("now", type_=UtcDateTime()))
    return stmt.on_conflict_do_update(index_elements=[due_set_aside.c.job_key], set_={
        "bucket": stmt.excluded.bucket, "reason": stmt.excluded.reason,
        "set_at": stmt.excluded.set_at})


RECORD_SET_ASIDE = {"postgresql": _record_set_aside(postgresql),
                    "sqlite": _record_set_aside(sqlite)}


# server_started: when the server started, and when its statistics were last reset
# (crash recovery resets them, also when one backend's crash makes the postmaster
# reset shared memory without restarting): a change in either means the last settle
# writes may be lost (scheduler/store_journal.py).
_ARCHIVER = table("pg_stat_archiver", column("stats_reset"))
SERVER_STARTED = select(func.pg_postmaster_start_time(),
                        select(_ARCHIVER.c.stats_reset).scalar_subquery())
#: The worker's writes that commit without waiting for the WAL flush: a database crash
#: may lose them, so each process writes its recent ones again after a restart.
JOURNALED = (RESCHEDULE, FINISH, SET_LEASE)


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

    def __init__(self, engine: Engine, url: str) -> None:
        self.url = url
        cargs, cparams = engine.dialect.create_connect_args(engine.url)
        self._connect = (tuple(cargs), dict(cparams))
        self._dialect = engine.dialect
        self._compiled: dict[int, tuple[str, dict[str, Any]]] = {}
        self._free: queue.LifoQueue[psycopg.Connection[Any]] = queue.LifoQueue()
        self._all: list[psycopg.Connection[Any]] = []
        self._lock = threading.Lock()
        #: Connections found broken so far (the settle journal writes again after one).
        self.broken = 0
        # A store dropped without close() still closes its connections.
        weakref.finalize(self, _close_all, self._all)

    def _sql(self, stmt: Statement) -> tuple[str, dict[str, Any]]:
        if id(stmt) not in self._compiled:
            compiled = stmt.compile(dialect=self._dialect)
            self._compiled[id(stmt)] = (str(compiled), dict(compiled.params))
        return self._compiled[id(stmt)]

    def _open(self) -> psycopg.Connection[Any]:
        cargs, cparams = self._connect
        conn = psycopg.connect(*cargs, **cparams, autocommit=True)
        conn.execute("SET synchronous_commit TO off")
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
        """A connection for one statement or transaction; psycopg errors become ours."""
        conn = None
        try:
            conn = self._checkout(what)
            yield conn
        except psycopg.OperationalError as exc:
            if conn is not None:
                self._discard(conn)
                conn = None
            raise StoreUnavailable(f"due-jobs store {self.url}: cannot {what}: {exc}") from exc
        except psycopg.Error as exc:
            raise StoreError(f"due-jobs store {self.url}: {what} failed: {exc}") from exc
        finally:
            if conn is not None:
                self._free.put(conn)

    def execute(self, what: str, stmt: Statement, params: dict[str, Any]) -> tuple[Any, int]:
        sql, defaults = self._sql(stmt)
        with self._connection(what) as conn:
            cur = conn.execute(sql, {**defaults, **params})
            return (cur.fetchone() if cur.description else None), cur.rowcount

    @contextmanager
    def transaction(self, what: str) -> Iterator[Callable[[Statement, dict[str, Any]],
                                                         list[tuple[Any, ...]]]]:
        """A durable transaction on one connection: yields ``run(stmt, params)``
        returning the rows (the per-job statements' ``synchronous_commit off`` is
        switched back on for it)."""
        with self._connection(what) as conn:
            def run(stmt: Statement, params: dict[str, Any]) -> list[tuple[Any, ...]]:
                sql, defaults = self._sql(stmt)
                cur = conn.execute(sql, {**defaults, **params})
                return cur.fetchall() if cur.description else []

            with conn.transaction():
                conn.execute("SET LOCAL synchronous_commit TO on")
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


@dataclass(frozen=True)
class BucketStats:
    """What ``recur status`` shows for one bucket."""

    bucket: str
    scheduled: int
    due: int
    oldest_due_at: datetime | None
    dispatched: int
    expired: int
    recovered: int
    dead_lettered: int = 0
    #: Rows set aside (state SET_ASIDE): the broker cannot take their messages.
    set_aside: int = 0


#: Publishes claimed rows and returns only once the broker confirmed all of them: None,
#: or the rows it refused (set aside) and the lease stamps that changed.
Publisher = Callable[[list[Claimed]], Published | None]
#: Runs one statement in the caller's transaction (psycopg's ``run`` or SQLAlchemy's).
Execute = Callable[[Any, dict[str, Any]], Any]
#: Longest reason kept for a set-aside row.
MAX_REASON = 1000


@contextmanager
def _wrapped(url: str, what: str) -> Iterator[None]:
    """Turn driver errors into ours, naming what we were doing."""
    try:
        yield
    except (OperationalError, DBAPIError) as exc:
        if isinstance(exc, OperationalError) or exc.connection_invalidated:
            raise StoreUnavailable(f"due-jobs store {url}: cannot {what}: {exc}") from exc
        raise StoreError(f"due-jobs store {url}: {what} failed: {exc}") from exc
    except SQLAlchemyError as exc:
        raise StoreError(f"due-jobs store {url}: {what} failed: {exc}") from exc


class DueStore:
    """The one narrow interface to the due-jobs tables."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.url = engine.url.render_as_string(hide_password=True)
        self.dialect = engine.dialect.name
        self._raw = RawStatements(engine, self.url) if self.dialect == "postgresql" else None
        self._journal = None if self._raw is None else SettleJournal(
            self._raw.execute, self._server_started)
        # Task name <-> code; a code never changes once given, so caching is safe.
        self._codes: dict[str, int] = {}
        self._names: dict[int, str] = {}
        # A store dropped without close() still returns its pooled connections.
        weakref.finalize(self, engine.dispose)

    @classmethod
    def open(cls, url: str, *, check: bool = True) -> DueStore:
        """Connect to ``url``; with ``check``, refuse a schema that is not upgraded."""
        store = cls(make_engine(url))
        if check:
            check_schema(store.engine)
        return store

    def close(self) -> None:
        self.engine.dispose()
        if self._raw is not None:
            self._raw.close()
        if self._journal is not None:
            self._journal.close()

    def _server_started(self) -> Any:
        """The server's identity for the settle journal: its start and statistics reset
        times, and this process's broken connections (a restart, a crash recovery or a
        broken connection changes it)."""
        assert self._raw is not None
        row, _ = self._raw.execute("read the server's start time", SERVER_STARTED, {})
        return (*row, self._raw.broken)

    @contextmanager
    def _tx(self, what: str) -> Iterator[Connection]:
        with _wrapped(self.url, what), self.engine.begin() as conn:
            yield conn

    def _settle(self, what: str, stmt: Statement, params: dict[str, Any]
                ) -> tuple[Any, int]:
        """Run one of a worker's per-job statements: (first row or None, rowcount).

        On PostgreSQL it runs on this thread's own psycopg connection, compiled
        once, autocommitted, with ``synchronous_commit off``: SQLAlchemy's
        per-execution work and the wait for the WAL flush were most of a
        worker's cost per job. Not waiting for the flush is safe here because
        every such write is kept by this process for a few seconds and written
        again if the server crashed meanwhile (scheduler/store_journal.py), and
        behind that is the row's lease: a crash that loses one leaves the row
        dispatched, never a lost job. Producers' schedules and the scheduler's
        dispatches stay fully durable.
        """
        if self._raw is None:
            with self._tx(what) as conn:
                result = conn.execute(stmt, params)
                return (result.first() if result.returns_rows else None), result.rowcount
        if not any(stmt is journaled for journaled in JOURNALED):
            return self._raw.execute(what, stmt, params)
        assert self._journal is not None
        self._journal.before_write()
        done = self._raw.execute(what, stmt, params)
        self._journal.record(what, stmt, params)
        return done

    def _key_in(self, keys: list[str]) -> Any:
        """``job_key`` is one of ``keys``: on PostgreSQL one array parameter (``= ANY``),
        which the driver sends as is, instead of a thousand placeholders to parse."""
        if self.dialect == "postgresql":
            return due_jobs.c.job_key == any_(bindparam("keys", keys,
                                                        type_=postgresql.ARRAY(Text())))
        return due_jobs.c.job_key.in_(keys)

    def _insert(self) -> Any:
        """The dialect's INSERT with ON CONFLICT support."""
        module: Any = postgresql if self.dialect == "postgresql" else sqlite
        return module.insert

    # -- task names --------------------------------------------------------------

    def _task_codes(self, names: Iterable[str]) -> dict[str, int]:
        """Every known task name's code, with ``names`` registered if new.

        Registration commits on its own, before the rows that use the code:
        a code in the cache is always one the table holds.
        """
        if any(name not in self._codes for name in names):
            with self._tx("register task names") as conn:
                self._remember(task_codes(conn, names))
        return self._codes

    def _remember(self, codes: dict[str, int]) -> None:
        """Cache every registered name → code, and the reverse."""
        self._codes = codes
        self._names = {code: name for name, code in codes.items()}

    def _names_of(self, codes: set[int]) -> dict[int, str]:
        """Code → task name for ``codes``, re-read when another process added one."""
        if not codes <= self._names.keys():
            with self._tx("read task names") as conn:
                self._remember(task_codes(conn, ()))
        return self._names

    def _task_name(self, conn: Connection, code: int) -> str:
        """The name of task ``code``, re-read on ``conn`` when another process added it
        ("" for a code no name has: a row another writer made; it is set aside)."""
        if code not in self._names:
            self._remember(task_codes(conn, ()))
        return self._names.get(code, "")

    # -- producers -------------------------------------------------------------

    def schedule(self, jobs: Sequence[Job], now: datetime) -> None:
        """Upsert ``jobs`` by key (idempotent).

        A new key becomes a scheduled row. An existing scheduled key takes the
        new task, args and due time, and the later of its pull-forward floors.
        A dispatched one takes the new task and args but keeps its state, token
        and lease: it stays with its one live copy, whose reschedule (with its
        own due time) or finish decides.
        """
        if not jobs:
            return
        codes = self._task_codes({j.task for j in jobs})
        rows = [{"job_key": j.job_key, "task_id": codes[j.task], "bucket": j.bucket,
                 "args": j.args, "due_at": j.due_at, "early_at": j.early_at or NO_FLOOR,
                 "created_at": now, "updated_at": now}
                for j in jobs]
        stmt: Insert = self._insert()(due_jobs)
        new = stmt.excluded  # type: ignore[attr-defined]
        # upsert_job: insert, or refresh what/when of an existing key.
        state, aside = due_jobs.c.state, due_jobs.c.state == SET_ASIDE
        stmt = stmt.on_conflict_do_update(  # type: ignore[attr-defined]
            index_elements=[due_jobs.c.job_key],
            set_={"task_id": new.task_id, "bucket": new.bucket, "args": new.args,
                  "due_at": case((state == SCHEDULED, new.due_at), (aside, new.due_at),
                                 else_=due_jobs.c.due_at),
                  # a floor is only ever raised: a producer's write cannot undo the
                  # floor a run set (nor hammer a recurring job by re-sending it)
                  "early_at": case((aside, new.early_at),
                                   (and_(state == SCHEDULED,
                                         new.early_at > due_jobs.c.early_at), new.early_at),
                                   else_=due_jobs.c.early_at),
                  # a set-aside row written again is a new call: scheduled afresh
                  "state": case((aside, SCHEDULED), else_=state),
                  "attempts": case((aside, 0), else_=due_jobs.c.attempts),
                  "updated_at": new.updated_at})
        with self._tx("schedule jobs") as conn:
            conn.execute(stmt, rows)

    # -- workers ---------------------------------------------------------------

    def live_dispatch(self, job_key: str, *, wait: bool = True
                      ) -> tuple[int, datetime | None] | None:
        """(token, lease end) of the dispatched row ``job_key``; None if not dispatched.

        With ``wait`` the read waits for a dispatch of the row still being
        committed; without, it is a plain read of the last committed state
        (cheaper: no row lock), enough when it shows the copy is live.
        """
        stmt = LIVE_DISPATCH if wait else PEEK_DISPATCH
        row, _ = self._settle("read a job's token", stmt, {"key": job_key})
        if row is None or row[2] != DISPATCHED:
            return None
        lease: datetime | None = row[1]
        if lease is not None and lease.tzinfo is None:  # SQLite via the raw path never
            lease = lease.replace(tzinfo=UTC)
        return int(row[0]), lease

    def reschedule(self, job_key: str, token: int, due_at: datetime, now: datetime,
                   args: str | None = None, early_at: datetime | None = None) -> bool:
        """Put the dispatched row back to scheduled at ``due_at``, if ``token`` is current,
        with pull-forward floor ``early_at`` (None: no floor).

        Returns False (nothing changed) when the row was re-dispatched, cancelled
        or removed meanwhile: the caller is a stale copy.
        """
        _, count = self._settle("reschedule a job", RESCHEDULE, {
            "key": job_key, "current": token, "due": due_at, "now": now, "new_args": args,
            "early": early_at or NO_FLOOR})
        return count == 1

    def finish(self, job_key: str, token: int) -> bool:
        """Remove a finished one-shot job, if ``token`` is current (False: stale copy)."""
        _, count = self._settle("finish a job", FINISH, {"key": job_key, "current": token})
        return count == 1

    def set_lease(self, job_key: str, token: int, until: datetime) -> bool:
        """End the lease of dispatch ``token`` of ``job_key`` at ``until`` (False: stale)."""
        _, count = self._settle("set a job's lease", SET_LEASE, {
            "key": job_key, "current": token, "lease": until, "now": datetime.now(UTC)})
        return count == 1

    # -- the scheduler -----------------------------------------------------------

    def raw_connection(self) -> psycopg.Connection[Any]:
        """A new autocommit psycopg connection to this PostgreSQL store (the caller
        closes it); driver errors are the caller's to wrap."""
        cargs, cparams = self.engine.dialect.create_connect_args(self.engine.url)
        return psycopg.connect(*cargs, **cparams, autocommit=True)

    def discard_connections(self) -> None:
        """Drop every pooled connection (after an outage they are all broken): the
        next statement of each lane opens a fresh one, instead of each stale one
        failing once more."""
        self.close()

    def dispatch(self, bucket: str, limit: int, now: datetime, lease_until: datetime,
                 publish: Publisher, *, early: bool = False) -> int:
        """Claim up to ``limit`` rows of ``bucket``, publish them, mark them dispatched.

        Due rows (``due_at <= now``), or with ``early`` the earliest rows whatever
        their time (idle pull-forward). The rows stay locked while ``publish``
        runs; they are marked dispatched with a new token and a lease only after
        it returned (the broker confirmed). If it raises, nothing is marked. Rows
        the publisher refused are set aside in the same transaction (never claimed
        again); a row it sent again carries its own lease stamp. Returns the rows
        published.
        """
        claim = CLAIM_EARLY if early else CLAIM_DUE
        params = {"bucket": bucket, "now": now, "limit": limit}
        if self._raw is not None:
            # PostgreSQL: plain psycopg rows, statements compiled once; SQLAlchemy's
            # per-row work was a third of the drain's cost.
            with self._raw.transaction(f"dispatch bucket {bucket}") as run:
                rows = run(claim, params)
                names = self._names_of({code for _, code, *_ in rows})
                claimed = [Claimed(key, names.get(code, ""), bucket, args, due, token + 1,
                                   lease_until)
                           for key, code, args, due, token in rows]
                if not claimed:
                    return 0
                outcome = publish(claimed)
                leases = _leases(claimed, lease_until, outcome)
                for lease, keys in leases.items():
                    run(MARK_DISPATCHED, {"keys": keys, "lease": lease, "now": now})
                self._put_aside(run, refused_rows(claimed, outcome), now)
            return sum(map(len, leases.values()))
        with self._tx(f"dispatch bucket {bucket}") as conn:
            claimed = [Claimed(job_key=r.job_key, task=self._task_name(conn, r.task_id),
                               bucket=bucket, args=r.args, due_at=r.due_at, token=r.token + 1,
                               lease_until=lease_until)
                       for r in conn.execute(claim, params)]
            if not claimed:
                return 0
            outcome = publish(claimed)
            leases = _leases(claimed, lease_until, outcome)
            for lease, keys in leases.items():
                # mark_dispatched (SQLite): as MARK_DISPATCHED, with IN for the keys.
                conn.execute(update(due_jobs).where(self._key_in(keys))
                             .values(state=DISPATCHED, token=due_jobs.c.token + 1,
                                     due_at=lease, attempts=due_jobs.c.attempts + 1,
                                     updated_at=now))
            self._put_aside(conn.execute, refused_rows(claimed, outcome), now)
        return sum(map(len, leases.values()))

    def _put_aside(self, execute: Execute, refused: list[tuple[Claimed, Refusal]],
                   now: datetime) -> None:
        """Set ``refused`` rows aside with their reasons, in the caller's transaction
        (the rows are locked by it)."""
        record = RECORD_SET_ASIDE[self.dialect]
        for row, refusal in refused:
            execute(SET_ASIDE_ROW, {"key": row.job_key, "now": now})
            execute(record, {"key": row.job_key, "bucket": row.bucket, "now": now,
                             "reason": refusal.reason[:MAX_REASON]})

    def dead_letter_expired(self, now: datetime, max_attempts: int, limit: int,
                            publish: Publisher) -> dict[str, int]:
        """Move up to ``limit`` poison jobs to their dead-letter queue; count per bucket.

        A poison job is a dispatched row whose lease ran out after
        ``max_attempts`` dispatches without a finish or reschedule (its task
        keeps failing or killing its worker). ``publish`` puts its last copy on
        the bucket's dead-letter queue and returns once the broker confirmed;
        only then is the row deleted, in the same transaction: a crash in
        between leaves a duplicate, never a loss. A row whose dead letter cannot
        be published (``publish`` refused it) is set aside instead.
        """
        # poison_leases: expired dispatched rows out of attempts, not held elsewhere.
        poison = (select(due_jobs.c.job_key, due_jobs.c.task_id, due_jobs.c.bucket,
                         due_jobs.c.args, due_jobs.c.due_at, due_jobs.c.token,
                         due_jobs.c.attempts)
                  .where(due_jobs.c.state == DISPATCHED, due_jobs.c.due_at < now,
                         due_jobs.c.attempts >= max_attempts)
                  .order_by(due_jobs.c.due_at).limit(limit)
                  .with_for_update(skip_locked=True))
        with self._tx("dead-letter poison jobs") as conn:
            rows = [Claimed(job_key=r.job_key, task=self._task_name(conn, r.task_id),
                            bucket=r.bucket, args=r.args, due_at=r.due_at, token=r.token,
                            lease_until=r.due_at, attempts=r.attempts)
                    for r in conn.execute(poison)]
            if not rows:
                return {}
            refused = refused_rows(rows, publish(rows))
            self._put_aside(conn.execute, refused, now)
            kept = {row.job_key for row, _ in refused}
            gone = [r for r in rows if r.job_key not in kept]
            # drop_poison: the rows just dead-lettered (still locked by us).
            conn.execute(delete(due_jobs).where(
                due_jobs.c.job_key.in_([r.job_key for r in gone]),
                due_jobs.c.state == DISPATCHED))
            counts = Counter(r.bucket for r in gone)
            if counts:
                self._add_counters(conn, DEAD_LETTERED, counts)
        return dict(counts)

    def recover_expired(self, now: datetime, limit: int,
                        max_attempts: int | None = None) -> dict[str, int]:
        """Put up to ``limit`` dispatched rows whose lease ran out back to scheduled.

        They are due at once (their ``due_at``, the lease's end, has passed)
        and keep their token (the next dispatch gives them a new one). Rows with ``max_attempts`` or
        more dispatches are left to :meth:`dead_letter_expired`. Returns the
        count per bucket.
        """
        conditions = [due_jobs.c.state == DISPATCHED, due_jobs.c.due_at < now]
        if max_attempts is not None:
            conditions.append(due_jobs.c.attempts < max_attempts)
        # expired_leases: dispatched rows past their lease, not held by another scheduler.
        expired = (select(due_jobs.c.job_key)
                   .where(*conditions)
                   .order_by(due_jobs.c.due_at).limit(limit)
                   .with_for_update(skip_locked=True))
        # recover_leases: back to scheduled.
        recover = (update(due_jobs)
                   .where(due_jobs.c.job_key.in_(expired.scalar_subquery()),
                          due_jobs.c.state == DISPATCHED)
                   .values(state=SCHEDULED, updated_at=now)
                   .returning(due_jobs.c.bucket))
        with self._tx("recover expired leases") as conn:
            counts = Counter(conn.execute(recover).scalars())
            if counts:
                self._add_counters(conn, RECOVERED, counts)
        return dict(counts)

    def _add_counters(self, conn: Connection, name: str, counts: Counter[str]) -> None:
        stmt: Insert = self._insert()(due_counters)
        # bump_counter: add to a per-bucket running total.
        stmt = stmt.on_conflict_do_update(  # type: ignore[attr-defined]
            index_elements=[due_counters.c.bucket, due_counters.c.name],
            set_={"value": due_counters.c.value + stmt.excluded.value})  # type: ignore[attr-defined]
        conn.execute(stmt, [{"bucket": b, "name": name, "value": n} for b, n in counts.items()])

    # -- periodic entries --------------------------------------------------------

    def sync_periodic(self, entries: Sequence[PeriodicEntry], now: datetime) -> None:
        """Make the stored entries exactly ``entries``; a new or changed schedule
        starts from ``now``, an unchanged one keeps its next run."""
        names = [e.name for e in entries]
        table = periodic_entries
        with self._tx("store periodic entries") as conn:
            # drop_periodic: entries no longer configured.
            conn.execute(delete(table).where(table.c.name.not_in(names)))
            if not entries:
                return
            stmt: Insert = self._insert()(table)
            ex = stmt.excluded  # type: ignore[attr-defined]
            # upsert_periodic: keep next_run_at unless the schedule changed.
            stmt = stmt.on_conflict_do_update(  # type: ignore[attr-defined]
                index_elements=[table.c.name],
                set_={"task": ex.task, "bucket": ex.bucket, "args": ex.args,
                      "schedule": ex.schedule,
                      "next_run_at": case((table.c.schedule == ex.schedule,
                                           table.c.next_run_at), else_=ex.next_run_at)})
            conn.execute(stmt, [{"name": e.name, "task": e.task, "bucket": e.bucket,
                                 "args": e.args, "schedule": e.schedule,
                                 "next_run_at": next_run(e.schedule, now)} for e in entries])

    def fire_periodic(self, now: datetime) -> list[str]:
        """Write one due job for every entry whose time came; returns their names.

        The job key names the period, so a period fires once even if two
        schedulers got here (the entry row is locked, the job insert is idempotent).
        """
        table = periodic_entries
        # due_periodic: entries whose next run came, not held by another scheduler.
        due = (select(table).where(table.c.next_run_at <= now)
               .with_for_update(skip_locked=True))
        with self._tx("fire periodic entries") as conn:
            fired = list(conn.execute(due))
            # Registered in this transaction: codes it adds are not cached.
            codes = task_codes(conn, {entry.task for entry in fired})
            for entry in fired:
                key = f"periodic:{entry.name}:{entry.next_run_at.isoformat()}"
                # fire_periodic: the period's job (idempotent), then the next run.
                conn.execute(self._insert()(due_jobs).on_conflict_do_nothing(
                    index_elements=[due_jobs.c.job_key]),
                    {"job_key": key, "task_id": codes[entry.task], "bucket": entry.bucket,
                     "args": entry.args, "due_at": entry.next_run_at,
                     "early_at": entry.next_run_at,  # a beat entry runs at its time
                     "created_at": now, "updated_at": now})
                conn.execute(update(table).where(table.c.name == entry.name).values(
                    next_run_at=next_run(entry.schedule, max(now, entry.next_run_at)),
                    last_run_at=entry.next_run_at))
        return [entry.name for entry in fired]

    # -- operators ---------------------------------------------------------------

    def stats(self, now: datetime) -> dict[str, BucketStats]:
        """Per-bucket counts for ``recur status`` (one scan of the table)."""
        state, due_at = due_jobs.c.state, due_jobs.c.due_at

        def count(cond: Any) -> Any:
            return func.coalesce(func.sum(case((cond, 1), else_=0)), 0)

        is_due = and_(state == SCHEDULED, due_at <= now)
        # bucket_stats: scheduled, due, oldest due, dispatched, expired per bucket.
        rows = select(
            due_jobs.c.bucket, count(state == SCHEDULED), count(is_due),
            type_coerce(func.min(case((is_due, due_at), else_=None)), UtcDateTime()),
            count(state == DISPATCHED),
            count(and_(state == DISPATCHED, due_at < now)),
            count(state == SET_ASIDE),
        ).group_by(due_jobs.c.bucket)
        totals = select(due_counters.c.bucket, due_counters.c.name, due_counters.c.value)
        with self._tx("read statistics") as conn:
            counters: dict[tuple[str, str], int] = {
                (b, name): int(v) for b, name, v in conn.execute(totals)}
            found = {r[0]: BucketStats(r[0], int(r[1]), int(r[2]), r[3], int(r[4]), int(r[5]),
                                       counters.get((r[0], RECOVERED), 0),
                                       counters.get((r[0], DEAD_LETTERED), 0), int(r[6]))
                     for r in conn.execute(rows)}
        for bucket, _ in counters:
            found.setdefault(bucket, BucketStats(
                bucket, 0, 0, None, 0, 0, counters.get((bucket, RECOVERED), 0),
                counters.get((bucket, DEAD_LETTERED), 0)))
        return found


    def heads(self, buckets: Sequence[str], now: datetime, due_cap: int
              ) -> dict[str, BucketHead]:
        """Per bucket what the exporter reads often: each read is bounded, never a full scan.

        Oldest scheduled row: the first entry of the partial drain index. Due rows:
        counted through that index up to ``due_cap``. Dispatched rows: the lease index
        (as many as are in flight, bounded by the watermarks). Counters: a tiny table.
        """
        scheduled = and_(due_jobs.c.bucket == bindparam("bucket"), due_jobs.c.state == SCHEDULED)
        # oldest_scheduled: the drain index's first entry for the bucket.
        oldest = select(due_jobs.c.due_at).where(scheduled).order_by(due_jobs.c.due_at).limit(1)
        # due_capped: due rows counted through the drain index, at most due_cap.
        due_rows = select(due_jobs.c.job_key).where(
            scheduled, due_jobs.c.due_at <= bindparam("now", type_=UtcDateTime())
        ).limit(bindparam("cap")).subquery()
        due = select(func.count()).select_from(due_rows)
        # dispatched_per_bucket: rows in flight, through the lease index.
        leased = (select(due_jobs.c.bucket, func.count()).where(due_jobs.c.state == DISPATCHED)
                  .group_by(due_jobs.c.bucket))
        totals = select(due_counters.c.bucket, due_counters.c.name, due_counters.c.value)
        found: dict[str, BucketHead] = {}
        with self._tx("read the buckets' heads") as conn:
            in_flight = {str(b): int(n) for b, n in conn.execute(leased)}
            counters = {(str(b), str(n)): int(v) for b, n, v in conn.execute(totals)}
            for bucket in buckets:
                first = conn.execute(oldest, {"bucket": bucket}).scalar()
                count = conn.execute(due, {"bucket": bucket, "now": now, "cap": due_cap}).scalar()
                found[bucket] = BucketHead(
                    bucket, first, int(count or 0), int(count or 0) >= due_cap,
                    in_flight.get(bucket, 0), counters.get((bucket, RECOVERED), 0),
                    counters.get((bucket, DEAD_LETTERED), 0))
        return found


@dataclass(frozen=True)
class BucketHead:
    """A bucket at a glance, read cheaply (:meth:`DueStore.heads`)."""

    bucket: str
    oldest_scheduled_at: datetime | None
    due: int
    #: ``due`` reached the cap: there are at least that many.
    due_capped: bool
    dispatched: int
    recovered: int
    dead_lettered: int


def refused_rows(rows: list[Claimed], outcome: Published | None
                 ) -> list[tuple[Claimed, Refusal]]:
    """The rows a publish refused, with why."""
    if not outcome or not outcome.refused:
        return []
    return [(row, outcome.refused[row.job_key]) for row in rows
            if row.job_key in outcome.refused]


def _leases(rows: list[Claimed], lease_until: datetime, outcome: Published | None
            ) -> dict[datetime, list[str]]:
    """The published rows' keys by the lease stamp their confirmed copy carries."""
    if not outcome:
        return {lease_until: [row.job_key for row in rows]}
    found: dict[datetime, list[str]] = {}
    for row in rows:
        if row.job_key not in outcome.refused:
            lease = outcome.leases.get(row.job_key, lease_until)
            found.setdefault(lease, []).append(row.job_key)
    return found


def task_codes(conn: Connection, names: Iterable[str]) -> dict[str, int]:
    """Every registered task name's code, after registering ``names`` that are new."""
    known = {str(n): int(c) for c, n in conn.execute(select(due_tasks.c.code, due_tasks.c.name))}
    new = sorted(set(names) - known.keys())
    if new:
        module: Any = postgresql if conn.dialect.name == "postgresql" else sqlite
        # register_tasks: new names get the next codes (a racing process's win is kept).
        conn.execute(module.insert(due_tasks).on_conflict_do_nothing(
            index_elements=[due_tasks.c.name]), [{"name": n} for n in new])
        known = {str(n): int(c) for c, n in conn.execute(
            select(due_tasks.c.code, due_tasks.c.name))}
    return known


_stores: dict[tuple[int, str], DueStore] = {}


def get_store(url: str) -> DueStore:
    """This process's store for ``url`` (a forked worker child opens its own)."""
    key = (os.getpid(), url)
    if key not in _stores:
        _stores[key] = DueStore.open(url)
    return _stores[key]


def close_stores() -> None:
    """Close every store :func:`get_store` opened in this process."""
    for store in _stores.values():
        store.close()
    _stores.clear()
