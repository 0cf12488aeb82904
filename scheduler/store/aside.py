"""The due-jobs store's statements for rows set aside (state SET_ASIDE).

The scheduler sets a row aside, with its reason in ``due_set_aside``, when
the broker cannot take its message (scheduler/store/core.py does it inside the
dispatch that found it) or when its bucket is no longer in the bucket table
(:meth:`AsideRows.set_aside_bucket`). Here: finding those buckets without a
scan, listing a bucket's set-aside rows (``recur dead list``), putting them
back (``recur dead replay --store``), and sweeping reasons whose row moved on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from scheduler.store import operator_queries as q
from scheduler.store.base import StoreCore, task_codes
from scheduler.store.queries import RECORD_SET_ASIDE
from scheduler.store.records import MAX_REASON


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

    def __init__(self, store: StoreCore) -> None:
        self.store = store

    def scheduled_buckets(self) -> list[str]:
        """Every bucket that has scheduled rows."""
        with self.store.transaction("read the buckets of scheduled rows") as conn:
            return [str(b) for b in conn.execute(q.SCHEDULED_BUCKETS).scalars()]

    def set_aside_bucket(self, bucket: str, due_before: datetime, limit: int, reason: str,
                         now: datetime) -> int:
        """Set aside up to ``limit`` scheduled rows of ``bucket`` due before ``due_before``
        (a bucket no longer in the table), rows fair share dealt back too; returns how
        many."""
        with self.store.transaction(f"set aside rows of bucket {bucket}") as conn:
            keys = list(conn.execute(q.set_aside_rows(bucket, due_before, limit, now)).scalars())
            if len(keys) < limit:
                keys += conn.execute(q.set_aside_rows(bucket, due_before, limit - len(keys),
                                                      now, dealt=True)).scalars()
            if keys:
                conn.execute(RECORD_SET_ASIDE[self.store.dialect], [
                    {"key": key, "bucket": bucket, "reason": reason[:MAX_REASON], "now": now}
                    for key in keys])
        return len(keys)

    def rows(self, bucket: str | None, limit: int) -> list[AsideRow]:
        """Up to ``limit`` set-aside rows of ``bucket`` (None: every bucket), oldest first."""
        stmt = q.list_set_aside(bucket, limit)
        with self.store.transaction("list set-aside rows") as conn:
            found = list(conn.execute(stmt))
            names = {code: name for name, code in task_codes(conn, ()).items()}
        return [AsideRow(r.job_key, r.bucket, names.get(r.task_id, f"#{r.task_id}"), r.reason,
                         r.set_at, r.attempts, r.args) for r in found]

    def replay(self, bucket: str | None, keys: Sequence[str], limit: int,
               now: datetime) -> list[str]:
        """Put set-aside rows back to scheduled, due now, attempts anew: ``keys`` if given,
        else up to ``limit`` of ``bucket`` (None: every bucket). Returns the keys."""
        stmt = q.replay_set_aside(bucket, list(keys), limit, now)
        with self.store.transaction("replay set-aside rows") as conn:
            done = list(conn.execute(stmt).scalars())
            if done:
                conn.execute(q.drop_reasons(done))
        return [str(key) for key in done]

    def sweep_reasons(self) -> int:
        """Delete the reasons whose row is no longer set aside (cancelled, replayed, written
        again); returns how many. The table holds set-aside rows only: small."""
        with self.store.transaction("sweep set-aside reasons") as conn:
            return int(conn.execute(q.SWEEP_SET_ASIDE).rowcount or 0)
