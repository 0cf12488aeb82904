"""The due-jobs store's one narrow interface: ``DueStore``.

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
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import cache

from scheduler.periodic import PeriodicEntry
from scheduler.store import periodic_entries, readings, sweeps
from scheduler.store.base import StoreCore
from scheduler.store.conflicts import rerun_conflicts
from scheduler.store.connection import make_engine
from scheduler.store.fair import claim_rows
from scheduler.store.hot_sql import PUBLISHING
from scheduler.store.queries import (
    CLAIM_DUE,
    CLAIM_EARLY,
    FINISH,
    LIVE_DISPATCH,
    MARK_DISPATCHED,
    PEEK_DISPATCH,
    RESCHEDULE,
    SET_LEASE,
    mark_dispatched_in,
    upsert_jobs,
)
from scheduler.store.records import (
    BucketHead,
    BucketStats,
    Claimed,
    Job,
    Publisher,
    leases_of,
    refused_rows,
)
from scheduler.store.schema import DISPATCHED, NO_FLOOR, next_token
from scheduler.store.schema_check import check_schema

#: Built once per dialect: building it each call was a third of a producer's call.
_upsert_jobs = cache(upsert_jobs)


class DueStore(StoreCore):
    """The one narrow interface to the due-jobs tables."""

    @classmethod
    def open(cls, url: str, *, check: bool = True) -> DueStore:
        """Connect to ``url``; with ``check``, refuse a schema that is not upgraded."""
        store = cls(make_engine(url))
        if check:
            check_schema(store.engine)
        return store

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
        stmt = _upsert_jobs(self.dialect)

        def upsert() -> None:  # run again when a concurrent writer's made it roll back
            with self.transaction("schedule jobs") as conn:
                conn.execute(stmt, rows)
        rerun_conflicts(upsert)

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

    def dispatch(self, bucket: str, limit: int, now: datetime, lease_until: datetime,
                 publish: Publisher, *, early: bool = False, dealt: bool = False) -> int:
        """Claim up to ``limit`` rows of ``bucket``, publish them, mark them dispatched.

        Due rows (``due_at <= now``), or with ``early`` the earliest rows whatever
        their time (idle pull-forward). The rows stay locked while ``publish``
        runs; they are marked dispatched with a new token and a lease only after
        it returned (the broker confirmed). If it raises, nothing is marked. Rows
        the publisher refused are set aside in the same transaction (never claimed
        again); a row it sent again carries its own lease stamp. Returns the rows
        published. With ``dealt``, the rows fair share dealt into rounds come first
        (store/fair.py), then the others in due order.
        """
        claim = CLAIM_EARLY if early else CLAIM_DUE
        params = {"bucket": bucket, "now": now, "limit": limit}
        if self._raw is not None:
            # PostgreSQL: plain psycopg rows, statements compiled once; SQLAlchemy's
            # per-row work was a third of the drain's cost.
            with self._raw.transaction(f"dispatch bucket {bucket}") as run:
                run(PUBLISHING, {})
                rows = claim_rows(run, claim, params, dealt and not early)
                names = self._names_of({code for _, code, *_ in rows})
                claimed = [Claimed(key, names.get(code, ""), bucket, args, due,
                                   next_token(token), lease_until)
                           for key, code, args, due, token in rows]
                if not claimed:
                    return 0
                outcome = publish(claimed)
                leases = leases_of(claimed, lease_until, outcome)
                for lease, keys in leases.items():
                    run(MARK_DISPATCHED, {"keys": keys, "lease": lease, "now": now})
                self.put_aside(run, refused_rows(claimed, outcome), now)
            return sum(map(len, leases.values()))
        with self.transaction(f"dispatch bucket {bucket}") as conn:
            claimed = [Claimed(job_key=r.job_key, task=self.task_name(conn, r.task_id),
                               bucket=bucket, args=r.args, due_at=r.due_at,
                               token=next_token(r.token), lease_until=lease_until)
                       for r in claim_rows(conn.execute, claim, params, dealt and not early)]
            if not claimed:
                return 0
            outcome = publish(claimed)
            leases = leases_of(claimed, lease_until, outcome)
            for lease, keys in leases.items():
                conn.execute(mark_dispatched_in(self.dialect, keys, lease, now))
            self.put_aside(conn.execute, refused_rows(claimed, outcome), now)
        return sum(map(len, leases.values()))

    def dead_letter_expired(self, now: datetime, max_attempts: int, limit: int,
                            publish: Publisher) -> dict[str, int]:
        """Move up to ``limit`` poison jobs to their dead-letter queue (sweeps.py)."""
        return sweeps.dead_letter_expired(self, now, max_attempts, limit, publish)

    def recover_expired(self, now: datetime, limit: int,
                        max_attempts: int | None = None) -> dict[str, int]:
        """Put up to ``limit`` rows whose lease ran out back to scheduled (sweeps.py)."""
        return sweeps.recover_expired(self, now, limit, max_attempts)

    # -- periodic entries --------------------------------------------------------

    def sync_periodic(self, entries: Sequence[PeriodicEntry], now: datetime) -> None:
        """Make the stored entries exactly ``entries`` (periodic_entries.py)."""
        periodic_entries.sync_periodic(self, entries, now)

    def fire_periodic(self, now: datetime) -> list[str]:
        """Write one due job for every entry whose time came (periodic_entries.py)."""
        return periodic_entries.fire_due_entries(self, now)

    # -- operators ---------------------------------------------------------------

    def stats(self, now: datetime) -> dict[str, BucketStats]:
        """Per-bucket counts for ``recur status`` (readings.py)."""
        return readings.stats(self, now)

    def heads(self, buckets: Sequence[str], now: datetime, due_cap: int
              ) -> dict[str, BucketHead]:
        """Per bucket what the exporter reads often, each read bounded (readings.py)."""
        return readings.heads(self, buckets, now, due_cap)


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
