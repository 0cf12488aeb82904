"""The due-jobs store's operator statements: read, list, cancel and move jobs; pause buckets.

Every statement here is served by an index, so each call costs the same at
10 million rows as at ten:

- one job: the primary key;
- a page of ``recur jobs list``: a *bounded walk* of one index in its order,
  resumed from a keyset cursor. The filters the index serves bound the walk
  (a user: ``ix_due_jobs_user``; a bucket's scheduled rows, and due times:
  ``ix_due_jobs_scheduled``, merged with ``ix_due_jobs_dealt_due`` for rows fair
  share dealt into rounds; dispatched rows: ``ix_due_jobs_leased``; else
  the primary key); the other filters are tested on the walked rows only. A
  page walks at most ``walk`` rows: with a filter no index serves, a page may
  come back short (even empty) with a cursor to go on from, never a scan of
  the table;
- a user's jobs to cancel or move: ``ix_due_jobs_user``, a batch per transaction.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, or_, true

from scheduler.store import operator_queries as q
from scheduler.store.base import StoreCore, task_codes
from scheduler.store.conflicts import rerun_conflicts
from scheduler.store.fair_queries import scheduled_in_due_order as in_due_order
from scheduler.store.schema import DISPATCHED, SCHEDULED, SET_ASIDE, due_jobs

STATES = {"scheduled": SCHEDULED, "dispatched": DISPATCHED, "set-aside": SET_ASIDE}
STATE_NAMES = {code: name for name, code in STATES.items()}
#: Rows one page walks at most when a filter is not served by the index it walks.
WALK = 5000
#: Rows one transaction of a user's cancel deletes.
CANCEL_BATCH = 1000


@dataclass(frozen=True)
class JobRow:
    """One due-jobs row as an operator sees it."""

    job_key: str
    task: str
    bucket: str
    state: str
    #: Scheduled: when it is due. Dispatched: when its lease ends.
    due_at: datetime
    #: The earliest time the idle pull-forward may run it (scheduler/pullforward.py).
    early_at: datetime
    created_at: datetime
    #: The last dispatch, reschedule or producer write.
    updated_at: datetime
    token: int
    attempts: int
    runs: int
    args: str


@dataclass(frozen=True)
class JobFilter:
    """What ``recur jobs list`` shows; None matches everything."""

    bucket: str | None = None
    user: str | None = None
    task: str | None = None
    state: str | None = None
    due_before: datetime | None = None
    due_after: datetime | None = None


@dataclass(frozen=True)
class Page:
    """One page: its jobs, rows walked for it, the cursor of the next page (None: the end)."""

    jobs: list[JobRow]
    walked: int
    cursor: str | None
    #: The index the page walked, for the operator.
    index: str


def encode_cursor(values: Sequence[Any]) -> str:
    """An opaque, shell-safe cursor for the keyset position ``values``."""
    raw = json.dumps([v.isoformat() if isinstance(v, datetime) else v for v in values])
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> list[Any]:
    """The keyset position of a cursor; ValueError if it is not one of ours."""
    raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    values = json.loads(raw)
    if not isinstance(values, list) or not values or not all(
            isinstance(v, str) for v in values):
        raise ValueError("not a cursor")
    return values


@dataclass(frozen=True)
class Walk:
    """How a page walks: its index's conditions, order, keyset, and the other filters."""

    index: str
    bound: list[ColumnElement[bool]]
    order: tuple[Any, ...]
    rest: list[ColumnElement[bool]]

    def after(self, cursor: str) -> ColumnElement[bool]:
        """Rows strictly after the cursor in this walk's order; ValueError for a cursor
        that is not one of this walk's (another listing's, or made up)."""
        values = decode_cursor(cursor)
        if len(self.order) == 1:
            newer: ColumnElement[bool] = due_jobs.c.job_key > values[-1]
            return newer
        due, key = datetime.fromisoformat(values[0]), values[-1]
        if len(values) != 2 or due.tzinfo is None:
            raise ValueError("not a cursor of this walk")
        return and_(due_jobs.c.due_at >= due,
                    or_(due_jobs.c.due_at > due, due_jobs.c.job_key > key))

    def cursor_of(self, row: JobRow) -> str:
        if len(self.order) == 1:
            return encode_cursor([row.job_key])
        return encode_cursor([row.due_at, row.job_key])


class JobControl:
    """Operator statements on one store (``scheduler/jobs.py`` is the API over them)."""

    def __init__(self, store: StoreCore) -> None:
        self.store = store
        self.user_of: ColumnElement[str] = q.user_of(store.dialect)

    def _row(self, r: Any, names: dict[int, str]) -> JobRow:
        return JobRow(r.job_key, names.get(r.task_id, f"#{r.task_id}"), r.bucket,
                      STATE_NAMES.get(r.state, str(r.state)), r.due_at, r.early_at,
                      r.created_at, r.updated_at, r.token, r.attempts, r.runs, r.args)

    def _names(self) -> dict[int, str]:
        with self.store.transaction("read task names") as conn:
            return {code: name for name, code in task_codes(conn, ()).items()}

    def task_code(self, name: str) -> int | None:
        """The code of task ``name`` (None: no row ever named it)."""
        with self.store.transaction("read task names") as conn:
            return task_codes(conn, ()).get(name)

    def get(self, job_key: str) -> JobRow | None:
        stmt = q.job_by_key(job_key)
        with self.store.transaction("read a job") as conn:
            row = conn.execute(stmt).first()
        return None if row is None else self._row(row, self._names())

    def walk_of(self, f: JobFilter, task_code: int | None) -> Walk:
        """The index a page of ``f`` walks, the filters it serves, and the others."""
        c = due_jobs.c
        due: list[ColumnElement[bool]] = []
        if f.due_before is not None:
            due.append(c.due_at < f.due_before)
        if f.due_after is not None:
            due.append(c.due_at >= f.due_after)
        wanted: dict[str, ColumnElement[bool]] = {}
        if f.bucket is not None:
            wanted["bucket"] = c.bucket == f.bucket
        if f.user is not None:
            wanted["user"] = self.user_of == f.user
        if task_code is not None:
            wanted["task"] = c.task_id == task_code
        if f.state is not None:
            wanted["state"] = c.state == STATES[f.state]
        if f.user is not None:
            by_user = [wanted.pop("user")]
            return Walk("ix_due_jobs_user", by_user, (c.job_key,), [*wanted.values(), *due])
        if f.state == "scheduled" and f.bucket is not None:
            by_due = [wanted.pop("state"), wanted.pop("bucket"), *due]
            return Walk("ix_due_jobs_scheduled", by_due, (c.due_at, c.job_key),
                        list(wanted.values()))
        if f.state == "dispatched":
            by_lease = [wanted.pop("state"), *due]
            return Walk("ix_due_jobs_leased", by_lease, (c.due_at, c.job_key),
                        list(wanted.values()))
        return Walk("due_jobs_pkey", [], (c.job_key,), [*wanted.values(), *due])

    def page(self, f: JobFilter, limit: int, after: str | None = None,
             walk: int = WALK) -> Page:
        """Up to ``limit`` jobs matching ``f`` after cursor ``after``, walking at most
        ``walk`` rows (only ``limit`` when the index serves every filter)."""
        code = None
        if f.task is not None:
            code = self.task_code(f.task)
            if code is None:
                return Page([], 0, None, "due_tasks")
        plan = self.walk_of(f, code)
        where = [*plan.bound, *([plan.after(after)] if after else [])]
        hit = and_(*plan.rest) if plan.rest else true()
        steps = walk if plan.rest else limit
        stmt = (in_due_order(hit, where, plan.order, steps)  # rows dealt back too
                if plan.index == "ix_due_jobs_scheduled" else
                q.list_jobs(hit, where, plan.order, steps))
        with self.store.transaction("list jobs") as conn:
            rows = list(conn.execute(stmt))
        names = self._names()
        jobs: list[JobRow] = []
        cursor = None
        for walked, r in enumerate(rows, 1):
            if not r.hit:
                continue
            jobs.append(self._row(r, names))
            if len(jobs) == limit:
                more = walked < len(rows) or len(rows) == steps
                return Page(jobs, walked, plan.cursor_of(jobs[-1]) if more else None,
                            plan.index)
        if len(rows) == steps and rows:
            cursor = plan.cursor_of(self._row(rows[-1], names))
        return Page(jobs, len(rows), cursor, plan.index)

    def _write(self, what: str, stmt: Any) -> list[Any]:
        """The rows ``stmt`` returns, in a transaction of its own; run again when the server
        rolled it back for a concurrent writer of its rows (a dispatch, a run's reschedule:
        scheduler/store/conflicts.py)."""
        def once() -> list[Any]:
            with self.store.transaction(what) as conn:
                return list(conn.execute(stmt))
        return rerun_conflicts(once)

    def cancel(self, job_key: str) -> JobRow | None:
        """Delete the row ``job_key`` (whatever its state); the row as it was, or None."""
        names = self._names()
        rows = self._write("cancel a job", q.cancel_job(job_key))
        return self._row(rows[0], names) if rows else None

    def cancel_user(self, user: str,
                    then: Callable[[list[JobRow]], None] | None = None) -> Counter[str]:
        """Delete every row of ``user``'s messages, a batch per transaction; count per
        state. ``then`` gets each batch's rows as they were once its transaction is over
        (so slow work on them, such as storing REVOKED, holds no transaction open, and
        memory stays one batch)."""
        counts: Counter[str] = Counter()
        stmt = q.cancel_user(self.user_of, user, CANCEL_BATCH)
        names = self._names()
        while True:
            found = self._write("cancel a user's jobs", stmt)
            if any(r.task_id not in names for r in found):  # a task first named since
                names = self._names()
            rows = [self._row(r, names) for r in found]
            counts.update(row.state for row in rows)
            if then is not None and rows:
                then(rows)
            if len(found) < CANCEL_BATCH:
                return counts

    def move(self, job_key: str, due_at: datetime, now: datetime) -> JobRow | None:
        """Make the scheduled row ``job_key`` due at ``due_at``, never pulled forward
        before it; None when it is not scheduled (missing or dispatched)."""
        names = self._names()
        rows = self._write("reschedule a job", q.move_job(job_key, due_at, now))
        return self._row(rows[0], names) if rows else None

    def move_user(self, user: str, due_at: datetime, now: datetime) -> tuple[int, int]:
        """Move every scheduled row of ``user`` as :meth:`move` does, a batch of keys per
        transaction along ``ix_due_jobs_user``; (rows moved, rows left as they were)."""
        moved = left = 0
        after = ""
        while True:
            def batch(after: str = after) -> tuple[list[str], int]:
                with self.store.transaction("reschedule a user's jobs") as conn:
                    keys = list(conn.execute(q.user_keys(self.user_of, user, after,
                                                         CANCEL_BATCH)).scalars())
                    return keys, len(list(conn.execute(q.move_jobs(
                        self.store.dialect, keys, due_at, now)))) if keys else 0
            keys, done = rerun_conflicts(batch)
            moved, left = moved + done, left + len(keys) - done
            if len(keys) < CANCEL_BATCH:
                return moved, left
            after = keys[-1]

    def pause(self, bucket: str, now: datetime) -> bool:
        """Stop dispatching ``bucket``; False if it was paused already."""
        stmt = q.pause_bucket(self.store.dialect, bucket, now)
        with self.store.transaction("pause a bucket") as conn:
            return conn.execute(stmt).first() is not None

    def resume(self, bucket: str) -> bool:
        """Dispatch ``bucket`` again; False if it was not paused."""
        stmt = q.resume_bucket(bucket)
        with self.store.transaction("resume a bucket") as conn:
            return conn.execute(stmt).first() is not None

    def paused(self) -> dict[str, datetime]:
        """Paused buckets and since when."""
        with self.store.transaction("read paused buckets") as conn:
            return {str(b): at for b, at in conn.execute(q.PAUSED_BUCKETS)}
