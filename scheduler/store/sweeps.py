"""The scheduler's sweeps of leases that ran out: poison jobs to their dead-letter
queue, the others back to scheduled."""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from scheduler.store.base import StoreCore
from scheduler.store.hot_sql import PUBLISHING
from scheduler.store.queries import drop_poison, poison_leases, recover_leases
from scheduler.store.records import DEAD_LETTERED, RECOVERED, Claimed, Publisher, refused_rows


def dead_letter_expired(store: StoreCore, now: datetime, max_attempts: int, limit: int,
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
    poison = poison_leases(now, max_attempts, limit)
    with store.transaction("dead-letter poison jobs") as conn:
        if store.dialect == "postgresql":
            conn.exec_driver_sql(PUBLISHING.sql)
        rows = [Claimed(job_key=r.job_key, task=store.task_name(conn, r.task_id),
                        bucket=r.bucket, args=r.args, due_at=r.due_at, token=r.token,
                        lease_until=r.due_at, attempts=r.attempts)
                for r in conn.execute(poison)]
        if not rows:
            return {}
        refused = refused_rows(rows, publish(rows))
        store.put_aside(conn.execute, refused, now)
        kept = {row.job_key for row, _ in refused}
        gone = [r for r in rows if r.job_key not in kept]
        conn.execute(drop_poison([r.job_key for r in gone]))
        counts = Counter(r.bucket for r in gone)
        if counts:
            store.add_counters(conn, DEAD_LETTERED, counts)
    return dict(counts)


def recover_expired(store: StoreCore, now: datetime, limit: int,
                    max_attempts: int | None = None) -> dict[str, int]:
    """Put up to ``limit`` dispatched rows whose lease ran out back to scheduled.

    They are due at once (their ``due_at``, the lease's end, has passed)
    and keep their token (the next dispatch gives them a new one). Rows with
    ``max_attempts`` or more dispatches are left to :func:`dead_letter_expired`.
    Returns the count per bucket.
    """
    recover = recover_leases(now, limit, max_attempts)
    with store.transaction("recover expired leases") as conn:
        counts = Counter(conn.execute(recover).scalars())
        if counts:
            store.add_counters(conn, RECOVERED, counts)
    return dict(counts)
