"""The due-jobs store's statements for rows set aside (state SET_ASIDE).

The scheduler sets a row aside, with its reason in ``due_set_aside``, when
the broker cannot take its message (scheduler/store.py does it inside the
dispatch that found it) or when its bucket is no longer in the bucket table
(:meth:`AsideRows.set_aside_bucket`). Here: finding those buckets without a
scan, listing a bucket's set-aside rows (``recur dead list``), putting them
back (``recur dead replay --store``), and sweeping reasons whose row moved on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, delete, exists, select, text, update

from scheduler.schema import SCHEDULED, SET_ASIDE, due_jobs, due_set_aside
from scheduler.store import MAX_REASON, RECORD_SET_ASIDE, DueStore, task_codes

#: scheduled_buckets: every bucket with scheduled rows, one index probe per bucket (a
#: loose scan of ix_due_jobs_scheduled: never a scan of the rows).
SCHEDULED_BUCKETS = text(
    "WITH RECURSIVE b(bucket) AS ("
    " SELECT min(bucket) FROM due_jobs WHERE state = 0"
    " UNION ALL"
    " SELECT (SELECT min(bucket) FROM due_jobs WHERE state = 0 AND bucket > b.bucket)"
    " FROM b WHERE b.bucket IS NOT NULL"
    ") SELECT bucket FROM b WHERE bucket IS NOT NULL")
_COLUMNS = (due_set_aside.c.job_key, due_set_aside.c.bucket, due_set_aside.c.reason,
            due_set_aside.c.set_at, due_jobs.c.task_id, due_jobs.c.args, due_jobs.c.attempts)
_LIVE = and_(due_jobs.c.job_key == due_set_aside.c.job_key, due_jobs.c.state == SET_ASIDE)


@dataclass(frozen=True)
class AsideRow:
    """One set-aside row as an operator sees it."""

    job_key: str
    bucket: str
    task: str
    reason: str
    set_at: datetime
    attempts: int
    #: The stored call, as stored (it may be what could not be decoded).
    args: str


class AsideRows:
    """Set-aside rows of one store."""

    def __init__(self, store: DueStore) -> None:
        self.store = store

    def scheduled_buckets(self) -> list[str]:
        """Every bucket that has scheduled rows."""
        with self.store._tx("read the buckets of scheduled rows") as conn:
            return [str(b) for b in conn.execute(SCHEDULED_BUCKETS).scalars()]

    def set_aside_bucket(self, bucket: str, due_before: datetime, limit: int, reason: str,
                         now: datetime) -> int:
        """Set aside up to ``limit`` scheduled rows of ``bucket`` due before ``due_before``
        (a bucket no longer in the table); returns how many."""
        # aside_bucket_rows: the bucket's due rows, not held by another scheduler.
        pick = (select(due_jobs.c.job_key)
                .where(due_jobs.c.bucket == bucket, due_jobs.c.state == SCHEDULED,
                       due_jobs.c.due_at <= due_before)
                .order_by(due_jobs.c.due_at).limit(limit).with_for_update(skip_locked=True))
        # set_aside_rows: out of every index, with the reason recorded below.
        stmt = (update(due_jobs)
                .where(due_jobs.c.job_key.in_(pick.scalar_subquery()),
                       due_jobs.c.state == SCHEDULED)
                .values(state=SET_ASIDE, updated_at=now).returning(due_jobs.c.job_key))
        with self.store._tx(f"set aside rows of bucket {bucket}") as conn:
            keys = list(conn.execute(stmt).scalars())
            if keys:
                conn.execute(RECORD_SET_ASIDE[self.store.dialect], [
                    {"key": key, "bucket": bucket, "reason": reason[:MAX_REASON], "now": now}
                    for key in keys])
        return len(keys)

    def rows(self, bucket: str | None, limit: int) -> list[AsideRow]:
        """Up to ``limit`` set-aside rows of ``bucket`` (None: every bucket), oldest first."""
        # list_set_aside: ix_due_set_aside_bucket, each joined to its row by key.
        stmt = select(*_COLUMNS).join(due_jobs, _LIVE)
        if bucket is not None:
            stmt = stmt.where(due_set_aside.c.bucket == bucket)
        stmt = stmt.order_by(due_set_aside.c.set_at, due_set_aside.c.job_key).limit(limit)
        with self.store._tx("list set-aside rows") as conn:
            found = list(conn.execute(stmt))
            names = {code: name for name, code in task_codes(conn, ()).items()}
        return [AsideRow(r.job_key, r.bucket, names.get(r.task_id, f"#{r.task_id}"), r.reason,
                         r.set_at, r.attempts, r.args) for r in found]

    def replay(self, bucket: str | None, keys: Sequence[str], limit: int,
               now: datetime) -> list[str]:
        """Put set-aside rows back to scheduled, due now, attempts anew: ``keys`` if given,
        else up to ``limit`` of ``bucket`` (None: every bucket). Returns the keys."""
        pick: Any = select(due_set_aside.c.job_key).join(due_jobs, _LIVE)
        if keys:
            pick = pick.where(due_set_aside.c.job_key.in_(list(keys)))
        elif bucket is not None:
            pick = pick.where(due_set_aside.c.bucket == bucket)
        pick = pick.order_by(due_set_aside.c.set_at).limit(limit)
        # replay_set_aside: scheduled again (the next dispatch gives a new token).
        stmt = (update(due_jobs)
                .where(due_jobs.c.job_key.in_(pick.scalar_subquery()),
                       due_jobs.c.state == SET_ASIDE)
                .values(state=SCHEDULED, due_at=now, attempts=0, updated_at=now)
                .returning(due_jobs.c.job_key))
        with self.store._tx("replay set-aside rows") as conn:
            done = list(conn.execute(stmt).scalars())
            if done:
                conn.execute(delete(due_set_aside).where(due_set_aside.c.job_key.in_(done)))
        return [str(key) for key in done]

    def sweep_reasons(self) -> int:
        """Delete the reasons whose row is no longer set aside (cancelled, replayed, written
        again); returns how many. The table holds set-aside rows only: small."""
        # sweep_set_aside: reasons without a set-aside row.
        stmt = delete(due_set_aside).where(~exists().where(_LIVE))
        with self.store._tx("sweep set-aside reasons") as conn:
            return int(conn.execute(stmt).rowcount or 0)
