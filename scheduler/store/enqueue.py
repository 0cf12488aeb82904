"""Many producer calls in one durable transaction: the COPY path of ``apply_many``.

PostgreSQL: the rows travel as COPY text (the seed's format, bulk.py), streamed
while the caller still checks the next calls (a refused call rolls it all back).
While every key is new they go straight into ``due_jobs``; once a key is already
there (that store then keeps to this way) they go into a session-private staging
table and are merged with the very upsert one ``apply_async`` runs
(``queries.upsert_jobs``: a new key becomes a scheduled row, an existing one takes
the call as that upsert says, its fair-share turn back to 0), in job-key order, so
two writers that share keys lock them in one order. A key given twice keeps its last
call and the later of the two floors: what two ``apply_async`` calls in a row leave.
SQLite: the same upsert by ``executemany``. Either way one transaction, all or
nothing, durable on return.
"""
from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from functools import cache
from itertools import count
from typing import Any

import psycopg
from psycopg.copy import QueuedLibpqWriter
from sqlalchemy import Column, Dialect, MetaData, SmallInteger, Table, Text, select

from scheduler.store.bulk import copy_field
from scheduler.store.conflicts import is_conflict, rerun_conflicts
from scheduler.store.connection import KEY_TAKEN, store_errors
from scheduler.store.core import DueStore
from scheduler.store.queries import upsert_jobs
from scheduler.store.records import Job
from scheduler.store.schema import NO_FLOOR, UtcDateTime

#: The staged columns, in COPY order (created_at/updated_at: the transaction's time).
COLUMNS = ("job_key", "task_id", "bucket", "args", "due_at", "early_at")
# Session-private staging table (no WAL, no index); every commit empties it.
CREATE_ENQUEUE_STAGE = """
CREATE TEMPORARY TABLE IF NOT EXISTS recur_enqueue_stage (
    job_key text, task_id smallint, bucket text, args text, due_at timestamptz,
    early_at timestamptz
) ON COMMIT DELETE ROWS
"""
COPY_ENQUEUE_STAGE = f"COPY recur_enqueue_stage ({', '.join(COLUMNS)}) FROM STDIN"
#: Empties the staging table within the transaction (its calls are staged again).
EMPTY_ENQUEUE_STAGE = "TRUNCATE recur_enqueue_stage"
#: Straight into due_jobs while no key is there yet: half the work of stage + merge.
COPY_ENQUEUE_DIRECT = f"COPY due_jobs ({', '.join(COLUMNS)}) FROM STDIN"
_stage = Table("recur_enqueue_stage", MetaData(),
               Column("job_key", Text), Column("task_id", SmallInteger),
               Column("bucket", Text), Column("args", Text),
               Column("due_at", UtcDateTime), Column("early_at", UtcDateTime))
#: merge_enqueue_stage: apply_async's upsert, from the staging table, in key order.
MERGE_ENQUEUE_STAGE = (upsert_jobs("postgresql")
                       .from_select(list(COLUMNS), select(*(_stage.c[name] for name in COLUMNS))
                                    .order_by(_stage.c.job_key)))


@cache
def merge_sql(dialect: Dialect) -> str:
    """MERGE_ENQUEUE_STAGE as text for the driver's cursor (its constants inlined)."""
    return str(MERGE_ENQUEUE_STAGE.compile(dialect=dialect,
                                           compile_kwargs={"literal_binds": True}))


#: Marks a pooled connection whose session already has the staging table (PENDING:
#: created in the transaction under way, gone again if that rolls back).
STAGED = "recur_enqueue_stage"
PENDING = object()
#: The stores that met a key already in due_jobs: they stage and merge from then on (a
#: producer that sends a key again keeps doing so; a direct COPY that fails is lost work).
_merging: weakref.WeakSet[DueStore] = weakref.WeakSet()
#: Lines handed to COPY at a time: small, so the server takes one while the next calls
#: are checked (a large one waits for the socket).
CHUNK = 500
_NO_FLOOR_TEXT = NO_FLOOR.isoformat()


def last_calls(jobs: Sequence[Job]) -> list[Job]:
    """``jobs`` with each key once: its last call, with the latest floor any gave."""
    last: dict[str, Job] = {}
    for job in jobs:
        before = last.pop(job.job_key, None)  # re-inserted: the order of last calls
        if before is not None and (before.early_at or NO_FLOOR) > (job.early_at or NO_FLOOR):
            job = Job(job.job_key, job.task, job.bucket, job.args, job.due_at,
                      before.early_at)
        last[job.job_key] = job
    return list(last.values())


class _Rows:
    """The jobs a stream yields, as COPY text CHUNK lines at a time; every job taken is
    kept (a COPY that must be redone has them), its key noted (to tell repeats)."""

    def __init__(self, store: DueStore, stream: Iterable[Job]) -> None:
        self.store, self.stream = store, iter(stream)
        self.kept: list[Job] = []
        self.keys: set[str] = set()
        self.codes: dict[str, int] = {}

    def code(self, task: str) -> int:
        if task not in self.codes:
            self.codes = dict(self.store._task_codes({task}))
        return self.codes[task]

    def text(self, jobs: Iterable[Job]) -> Iterator[bytes]:
        batch: list[str] = []
        due: datetime | None = None  # the last due time written: calls often share theirs
        due_text = ""
        for j in jobs:
            if j.due_at is not due:
                due, due_text = j.due_at, j.due_at.isoformat()
            early = _NO_FLOOR_TEXT if j.early_at is None else j.early_at.isoformat()
            batch.append(f"{copy_field(j.job_key)}\t{self.code(j.task)}\t"
                         f"{copy_field(j.bucket)}\t{copy_field(j.args)}\t"
                         f"{due_text}\t{early}\n")
            if len(batch) == CHUNK:
                yield "".join(batch).encode()
                batch.clear()
        if batch:
            yield "".join(batch).encode()

    def taken(self) -> Iterator[Job]:
        for job in self.stream:
            self.kept.append(job)
            self.keys.add(job.job_key)
            yield job

    def take_all(self) -> list[Job]:
        for _ in self.taken():
            pass
        return self.kept


def schedule_many(store: DueStore, jobs: Iterable[Job], now: datetime,
                  before_commit: Callable[[], None] | None = None) -> int:
    """Upsert ``jobs`` as ``apply_async`` would, in one durable transaction; the rows
    written (one per distinct key).

    ``jobs`` may be a generator that checks each call as it is taken: its rows
    stream into the transaction while the next calls are checked, and an error it
    raises rolls everything back. ``before_commit`` runs once every job was taken.
    """
    rows = _Rows(store, jobs)
    if store.dialect != "postgresql":
        kept = rows.take_all()
        if before_commit is not None:
            before_commit()
        if kept:
            store.schedule(kept, now)
        return len(rows.keys)
    tries = count()

    def once() -> int:  # again (staged, every call already taken) after a conflict
        with store_errors(store.url, "write many jobs"):
            return _write(store, rows, before_commit, retry=next(tries) > 0)
    return rerun_conflicts(once)


def _write(store: DueStore, rows: _Rows, before_commit: Callable[[], None] | None,
           retry: bool) -> int:
    """One transaction on a pooled connection's psycopg session (COPY needs it)."""
    with store.engine.connect() as conn:
        pooled = conn.connection
        raw: Any = pooled.driver_connection
        info, committed = pooled.info, False
        try:
            with raw.transaction():
                direct = not retry and store not in _merging
                if not _copy(raw, info, rows, direct, merge_sql(store.engine.dialect)):
                    _merging.add(store)
                if before_commit is not None:
                    before_commit()
            committed = True
        except psycopg.OperationalError as exc:
            if not is_conflict(exc):  # rolled back for another writer: the session is sound
                conn.invalidate()  # broken: not back to the pool
            raise
        finally:
            if info.get(STAGED) is PENDING:  # committed: kept; rolled back: gone
                info[STAGED] = committed
        return len(rows.keys)


def _copy(raw: Any, info: dict[Any, Any], rows: _Rows, direct: bool, merge: str) -> bool:
    """With ``direct``, COPY the rows straight into due_jobs; if a key is already there,
    or without ``direct``, COPY them into the staging table and merge. Whether the
    direct COPY did it."""
    if direct:
        try:
            with raw.transaction():
                _stream(raw, COPY_ENQUEUE_DIRECT, rows.text(rows.taken()))
            return True
        except KEY_TAKEN:  # rolled back to the savepoint: stage and merge instead
            pass
    if not info.get(STAGED):
        with raw.cursor() as cur:
            cur.execute(CREATE_ENQUEUE_STAGE)
        info[STAGED] = PENDING  # the table is the session's once this commits
    staged = not rows.kept  # nothing taken yet: stage the calls as they are checked
    if staged:
        _stream(raw, COPY_ENQUEUE_STAGE, rows.text(rows.taken()))
    rows.take_all()
    if not staged or len(rows.keys) < len(rows.kept):  # a key given twice: its last call
        with raw.cursor() as cur:
            cur.execute(EMPTY_ENQUEUE_STAGE)
        _stream(raw, COPY_ENQUEUE_STAGE, rows.text(last_calls(rows.kept)))
    with raw.cursor() as cur:
        cur.execute(merge)
    return False


def _stream(raw: Any, statement: str, chunks: Iterator[bytes]) -> None:
    """COPY ``chunks``; a writer thread sends one while the next is made.

    An error making them (a refused call) ends the COPY as it stands and is raised
    after it, whatever the server said meanwhile: the caller's transaction then
    rolls back, and the refusal, not a key the server found taken, is the answer.
    """
    refused: Exception | None = None
    try:
        with raw.cursor() as cur, cur.copy(statement, writer=QueuedLibpqWriter(cur)) as copy:
            try:
                for data in chunks:
                    copy.write(data)
            except Exception as exc:
                refused = exc
    except psycopg.Error:
        if refused is None:
            raise
    if refused is not None:
        raise refused
