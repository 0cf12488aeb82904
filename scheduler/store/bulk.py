"""The due-jobs store's bulk path: the seed job loads millions of rows through it.

Rows travel as lines of PostgreSQL's COPY text format (``copy_line``), with
the task as its ``due_tasks`` code (``register_task``): the seed job builds
them from Arrow batches, so Python never holds a row as objects.

PostgreSQL: each chunk of lines is streamed with ``COPY`` straight into
``due_jobs``, one transaction per chunk. The first chunk that meets a job key
already there (a second run of the same seed, a retried Spark task) is rolled
back, and from then on that loader streams its chunks into a temporary
staging table (no WAL, no index) and merges them with ``INSERT ... SELECT ...
ON CONFLICT (job_key) DO NOTHING``. SQLite: the same idempotent insert by
``executemany``, for small seeds. Either way a row whose job key is already
there is left alone and counted as already present, so running a seed again,
or Spark retrying a lost task, never duplicates a job (nor resets one the
scheduler has moved on).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Protocol

from sqlalchemy.engine import make_url

from scheduler.store.base import task_codes
from scheduler.store.conflicts import rerun_conflicts
from scheduler.store.connection import (
    KEY_TAKEN,
    connect_url,
    is_sqlite,
    make_engine,
    translated,
)
from scheduler.store.queries import SEED_INSERT_SQLITE
from scheduler.store.text_queries import (
    BULK_SESSION,
    COPY_DIRECT,
    COPY_STAGE,
    CREATE_STAGE,
    MERGE_STAGE,
    SYNC_COMMIT_ON,
    TOUCH_TRANSACTION,
)

#: job_key, task code (see register_task), bucket, args (JSON text), due_at
#: (ISO-8601 text with its offset).
DueRow = tuple[str, str, str, str, str]
#: Shown in pg_stat_activity for the seed's connections.
APPLICATION_NAME = "recur-seed"
#: COPY text format: these characters are written as backslash escapes.
COPY_ESCAPES = (("\\", "\\\\"), ("\t", "\\t"), ("\n", "\\n"), ("\r", "\\r"))
_UNESCAPE = {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}

#: Merge attempts when a loader still copying directly deadlocks with this one.
MERGE_ATTEMPTS = 3


def copy_field(text: str) -> str:
    """``text`` escaped for COPY's text format."""
    for raw, escaped in COPY_ESCAPES:
        text = text.replace(raw, escaped)
    return text


def copy_line(row: DueRow) -> str:
    """One row as a COPY text-format line (with its newline)."""
    return "\t".join(copy_field(value) for value in row) + "\n"


def _unescape(field: str) -> str:
    if "\\" not in field:
        return field
    out, chars = [], iter(field)
    for ch in chars:
        out.append(_UNESCAPE.get(next(chars, ""), "") if ch == "\\" else ch)
    return "".join(out)


def parse_copy_line(line: str) -> DueRow:
    """The row a ``copy_line`` holds."""
    key, task, bucket, args, due = (_unescape(f) for f in line.rstrip("\n").split("\t"))
    return key, task, bucket, args, due


@dataclass(frozen=True)
class BulkResult:
    """Rows offered to the store, and how many of them were new."""

    offered: int = 0
    loaded: int = 0

    @property
    def present(self) -> int:
        """Rows whose job key was already in the table (left as they were)."""
        return self.offered - self.loaded

    def __add__(self, other: BulkResult) -> BulkResult:
        return BulkResult(self.offered + other.offered, self.loaded + other.loaded)


class BulkSink(Protocol):
    """Somewhere to load chunks of rows into, over one connection."""

    def load(self, lines: Sequence[str]) -> BulkResult: ...

    def close(self) -> None: ...

    def __enter__(self) -> BulkSink: ...

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None: ...


class _Closing:
    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> BulkSink:
        return self  # type: ignore[return-value]

    def __exit__(self, _t: type[BaseException] | None, _e: BaseException | None,
                 _tb: TracebackType | None) -> None:
        self.close()


def register_task(url: str, name: str) -> int:
    """The ``due_tasks`` code of task ``name`` in the store at ``url`` (registered if new)."""
    engine = make_engine(url)
    try:
        with translated(f"due-jobs database {engine.url!r}"), engine.begin() as conn:
            return task_codes(conn, [name])[name]
    finally:
        engine.dispose()


class PostgresBulk(_Closing):
    """COPY straight into due_jobs until a key is taken, then COPY + merge; one connection."""

    def __init__(self, url: str) -> None:
        self.url = url
        #: Copying straight into due_jobs; False once a chunk met a key already there.
        self.direct = True
        with translated(f"due-jobs database {make_url(url)!r}"):
            self.conn = connect_url(url, APPLICATION_NAME)
            for statement in (*BULK_SESSION, CREATE_STAGE):
                self.conn.execute(statement)

    def load(self, lines: Sequence[str]) -> BulkResult:
        """COPY ``lines`` and merge them, in one transaction."""
        return self.load_copy("".join(lines).encode(), len(lines))

    def load_copy(self, data: bytes | memoryview, rows: int) -> BulkResult:
        """Load ``rows`` lines already joined as COPY text (``data``), in one transaction.

        Straight into due_jobs while no key is taken: half the database's work
        of staging and merging. A taken key rolls the chunk back and turns the
        loader over to the merge, which leaves present rows alone.
        """
        if not rows:
            return BulkResult()
        with self._errors():
            if self.direct:
                try:
                    self._copy(COPY_DIRECT, data)
                    return BulkResult(rows, rows)
                except KEY_TAKEN:
                    self.direct = False
            # another loader's merge deadlocked with this one: run again (conflicts.py)
            return rerun_conflicts(lambda: BulkResult(
                rows, self._copy(COPY_STAGE, data, MERGE_STAGE)), MERGE_ATTEMPTS)

    def _copy(self, statement: str, data: bytes | memoryview, then: str | None = None) -> int:
        """COPY ``data`` with ``statement`` and run ``then``; the rows ``then`` inserted."""
        with self.conn.transaction(), self.conn.cursor() as cur:
            with cur.copy(statement) as copy:
                copy.write(data)
            if then is None:
                return 0
            cur.execute(then)
            return cur.rowcount

    def make_durable(self) -> None:
        """Wait until every chunk this loader committed is on disk.

        A commit with ``synchronous_commit`` on flushes the WAL up to its own
        record, so it covers every earlier commit of the session.
        """
        with self._errors():
            self.conn.execute(SYNC_COMMIT_ON)
            with self.conn.transaction():
                self.conn.execute(TOUCH_TRANSACTION)

    def _errors(self) -> AbstractContextManager[None]:
        return translated(f"due-jobs database {make_url(self.url)!r}",
                          f"bulk load into {make_url(self.url)!r} failed")

    def close(self) -> None:
        """Make what was loaded durable, then disconnect."""
        try:
            self.make_durable()
        finally:
            self.conn.close()

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        if t is None:
            self.close()
        else:  # failing anyway: the counts will not be reported
            self.conn.close()


class SqliteBulk(_Closing):
    """executemany of the idempotent insert, one transaction per chunk."""

    def __init__(self, url: str) -> None:
        self.engine = make_engine(url)
        self.statement = SEED_INSERT_SQLITE

    def load(self, lines: Sequence[str]) -> BulkResult:
        if not lines:
            return BulkResult()
        params = [{"job_key": key, "task_id": int(task), "bucket": bucket, "args": args,
                   "due_at": datetime.fromisoformat(due)}
                  for key, task, bucket, args, due in map(parse_copy_line, lines)]
        with (translated(f"due-jobs database {self.engine.url!r}",
                         f"bulk load into {self.engine.url!r} failed"),
              self.engine.begin() as conn):
            return BulkResult(len(lines), conn.execute(self.statement, params).rowcount)

    def close(self) -> None:
        self.engine.dispose()


def open_bulk(url: str) -> BulkSink:
    """A bulk sink for the due-jobs store at ``url``: COPY on PostgreSQL, else SQLite."""
    return SqliteBulk(url) if is_sqlite(url) else PostgresBulk(url)
