"""The operators' and the sweeps' statements, each named once: jobs (read, list, cancel,
move), bucket pauses, set-aside rows, and the rows behind dead copies.

Every one is served by an index (``control.py`` says which); the scheduler's and
the workers' statements are in ``queries.py``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Delete,
    Executable,
    Select,
    Update,
    and_,
    delete,
    exists,
    literal_column,
    select,
    text,
    update,
)

from scheduler.store.queries import insert_of, key_in
from scheduler.store.schema import (
    SCHEDULED,
    SET_ASIDE,
    USER_SQL,
    bucket_pauses,
    due_jobs,
    due_set_aside,
)

# -- jobs ---------------------------------------------------------------------------
#: The columns an operator sees of a row.
COLUMNS = (due_jobs.c.job_key, due_jobs.c.task_id, due_jobs.c.bucket, due_jobs.c.state,
           due_jobs.c.due_at, due_jobs.c.early_at, due_jobs.c.created_at,
           due_jobs.c.updated_at, due_jobs.c.token, due_jobs.c.attempts, due_jobs.c.runs,
           due_jobs.c.args)


def user_of(dialect: str) -> ColumnElement[str]:
    """The user id of a row's message, in exactly the text ``ix_due_jobs_user`` indexes."""
    return literal_column(USER_SQL[dialect])


def job_by_key(job_key: str) -> Select[Any]:
    """job_by_key: one row by primary key."""
    return select(*COLUMNS).where(due_jobs.c.job_key == job_key)


def list_jobs(hit: ColumnElement[bool], where: list[ColumnElement[bool]],
              order: tuple[Any, ...], steps: int) -> Select[Any]:
    """list_jobs: a bounded walk of one index in its order; ``hit`` marks the rows that
    pass the filters the index does not serve."""
    return select(*COLUMNS, hit.label("hit")).where(*where).order_by(*order).limit(steps)


def cancel_job(job_key: str) -> Executable:
    """cancel_job: the row goes; a copy in flight finds no row to reschedule."""
    return delete(due_jobs).where(due_jobs.c.job_key == job_key).returning(*COLUMNS)


def cancel_user(user_of: ColumnElement[str], user: str, batch: int) -> Executable:
    """cancel_user: a batch of the user's rows (ix_due_jobs_user), as they were."""
    rows = select(due_jobs.c.job_key).where(user_of == user).limit(batch)
    return (delete(due_jobs).where(due_jobs.c.job_key.in_(rows.scalar_subquery()))
            .returning(*COLUMNS))


def move_job(job_key: str, due_at: datetime, now: datetime) -> Update:
    """move_job: a scheduled row's new due time (its floor too: the operator's time)."""
    return (update(due_jobs)
            .where(due_jobs.c.job_key == job_key, due_jobs.c.state == SCHEDULED)
            .values(due_at=due_at, early_at=due_at, updated_at=now, turn=0)
            .returning(*COLUMNS))


def user_keys(user_of: ColumnElement[str], user: str, after: str, batch: int) -> Select[Any]:
    """user_keys: the user's next keys after ``after``, in key order (ix_due_jobs_user)."""
    return (select(due_jobs.c.job_key).where(user_of == user, due_jobs.c.job_key > after)
            .order_by(due_jobs.c.job_key).limit(batch))


def move_jobs(dialect: str, keys: list[str], due_at: datetime, now: datetime) -> Update:
    """move_jobs: the scheduled ones of ``keys`` to a new due time, as ``move_job``."""
    return (update(due_jobs)
            .where(key_in(dialect, keys), due_jobs.c.state == SCHEDULED)
            .values(due_at=due_at, early_at=due_at, updated_at=now, turn=0)
            .returning(due_jobs.c.job_key))


# -- bucket pauses ------------------------------------------------------------------
def pause_bucket(dialect: str, bucket: str, now: datetime) -> Any:
    """pause_bucket: idempotent."""
    insert: Any = insert_of(dialect)(bucket_pauses)
    return (insert.values(bucket=bucket, paused_at=now)
            .on_conflict_do_nothing(index_elements=[bucket_pauses.c.bucket])
            .returning(bucket_pauses.c.bucket))


def resume_bucket(bucket: str) -> Executable:
    """resume_bucket."""
    return (delete(bucket_pauses).where(bucket_pauses.c.bucket == bucket)
            .returning(bucket_pauses.c.bucket))


# paused_buckets: a handful of rows, read by the scheduler every pass.
PAUSED_BUCKETS = select(bucket_pauses.c.bucket, bucket_pauses.c.paused_at)

# -- set-aside rows -----------------------------------------------------------------
#: scheduled_buckets: every bucket with scheduled rows, one index probe per bucket (a
#: loose scan of ix_due_jobs_scheduled: never a scan of the rows).
SCHEDULED_BUCKETS = text(
    "WITH RECURSIVE b(bucket) AS ("
    " SELECT min(bucket) FROM due_jobs WHERE state = 0"
    " UNION ALL"
    " SELECT (SELECT min(bucket) FROM due_jobs WHERE state = 0 AND bucket > b.bucket)"
    " FROM b WHERE b.bucket IS NOT NULL"
    ") SELECT bucket FROM b WHERE bucket IS NOT NULL")
_ASIDE_COLUMNS = (due_set_aside.c.job_key, due_set_aside.c.bucket, due_set_aside.c.reason,
                  due_set_aside.c.set_at, due_jobs.c.task_id, due_jobs.c.args,
                  due_jobs.c.attempts)
_LIVE = and_(due_jobs.c.job_key == due_set_aside.c.job_key, due_jobs.c.state == SET_ASIDE)


def set_aside_rows(bucket: str, due_before: datetime, limit: int, now: datetime,
                   dealt: bool = False) -> Update:
    """set_aside_rows: the bucket's due rows (aside_bucket_rows: not held by another
    scheduler) out of every index; their reasons are recorded after. Those fair share
    dealt into rounds with ``dealt`` (their index), else the others (the drain index)."""
    pick = (select(due_jobs.c.job_key)
            .where(due_jobs.c.bucket == bucket, due_jobs.c.state == SCHEDULED,
                   due_jobs.c.turn != 0 if dealt else due_jobs.c.turn == 0,
                   due_jobs.c.due_at <= due_before)
            .order_by(due_jobs.c.due_at).limit(limit).with_for_update(skip_locked=True))
    return (update(due_jobs)
            .where(due_jobs.c.job_key.in_(pick.scalar_subquery()),
                   due_jobs.c.state == SCHEDULED)
            .values(state=SET_ASIDE, turn=0, updated_at=now).returning(due_jobs.c.job_key))


def list_set_aside(bucket: str | None, limit: int) -> Select[Any]:
    """list_set_aside: ix_due_set_aside_bucket, each joined to its row by key."""
    stmt = select(*_ASIDE_COLUMNS).join(due_jobs, _LIVE)
    if bucket is not None:
        stmt = stmt.where(due_set_aside.c.bucket == bucket)
    return stmt.order_by(due_set_aside.c.set_at, due_set_aside.c.job_key).limit(limit)


def replay_set_aside(bucket: str | None, keys: list[str], limit: int,
                     now: datetime) -> Update:
    """replay_set_aside: scheduled again (the next dispatch gives a new token): ``keys``
    if given, else up to ``limit`` of ``bucket`` (None: every bucket)."""
    pick: Any = select(due_set_aside.c.job_key).join(due_jobs, _LIVE)
    if keys:
        pick = pick.where(due_set_aside.c.job_key.in_(keys))
    elif bucket is not None:
        pick = pick.where(due_set_aside.c.bucket == bucket)
    pick = pick.order_by(due_set_aside.c.set_at).limit(limit)
    return (update(due_jobs)
            .where(due_jobs.c.job_key.in_(pick.scalar_subquery()),
                   due_jobs.c.state == SET_ASIDE)
            .values(state=SCHEDULED, due_at=now, attempts=0, updated_at=now)
            .returning(due_jobs.c.job_key))


def drop_reasons(keys: list[str]) -> Delete:
    """drop_reasons: the reasons of rows just replayed."""
    return delete(due_set_aside).where(due_set_aside.c.job_key.in_(keys))


# sweep_set_aside: reasons without a set-aside row.
SWEEP_SET_ASIDE = delete(due_set_aside).where(~exists().where(_LIVE))

# -- rows behind dead copies --------------------------------------------------------
_DEAD_COPY_ROWS = select(due_jobs.c.job_key, due_jobs.c.token, due_jobs.c.due_at,
                         due_jobs.c.state)


def dead_copy_rows(dialect: str, keys: list[str]) -> Select[Any]:
    """dead_copy_rows: the rows of the dead copies' jobs, by primary key."""
    return _DEAD_COPY_ROWS.where(key_in(dialect, keys))


# locked_dispatch: one row, locked for the verdict's write.
_LOCKED = (select(due_jobs.c.job_key, due_jobs.c.task_id, due_jobs.c.bucket, due_jobs.c.args,
                  due_jobs.c.token, due_jobs.c.due_at, due_jobs.c.state, due_jobs.c.attempts)
           .with_for_update())


def locked_dispatch(job_key: str) -> Select[Any]:
    """locked_dispatch: the row of ``job_key``, locked."""
    return _LOCKED.where(due_jobs.c.job_key == job_key)


def redispatch_dead_copy(job_key: str, now: datetime) -> Update:
    """redispatch_dead_copy: back to scheduled, due now (token kept)."""
    return (update(due_jobs).where(due_jobs.c.job_key == job_key)
            .values(state=SCHEDULED, due_at=now, updated_at=now))


def bury_job(job_key: str) -> Delete:
    """bury_job: the row just dead-lettered (still locked by us)."""
    return delete(due_jobs).where(due_jobs.c.job_key == job_key)
