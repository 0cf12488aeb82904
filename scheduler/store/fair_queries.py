"""The fair-share statements (scheduler/fair_share.py), each named once.

A scheduled row is *dealt* into a round (``turn`` > 0, migration 0007) while its
bucket is behind and a user dominates the head of its due rows. Dealt rows leave the
drain index (``ix_due_jobs_scheduled``: ``state = 0 AND turn = 0``) for two small
partial indexes that hold only them: ``ix_due_jobs_dealt`` (bucket, turn, due_at),
which their claim walks in round order, and ``ix_due_jobs_dealt_due`` (bucket,
due_at, job_key), which the readings walk in due order (the oldest due row, a page
of ``recur jobs list``). Every statement here is one range of one of them, or of the
drain index, bounded by its limit."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    ColumnElement,
    Integer,
    Select,
    Text,
    Update,
    and_,
    any_,
    bindparam,
    func,
    literal_column,
    select,
    union_all,
    update,
)
from sqlalchemy.dialects import postgresql

from scheduler.store.operator_queries import COLUMNS
from scheduler.store.schema import SCHEDULED, USER_SQL, UtcDateTime, due_counters, due_jobs

_NOW = bindparam("now", type_=UtcDateTime())
_BUCKET = due_jobs.c.bucket == bindparam("bucket")
#: A bucket's dealt rows (both dealt indexes' predicate: ``turn <> 0``, not ``> 0``, so
#: SQLite does not take it for a range of the round index where due order is wanted),
#: and the others.
DEALT_OF = and_(_BUCKET, due_jobs.c.state == SCHEDULED, due_jobs.c.turn != 0)
UNDEALT_OF = and_(_BUCKET, due_jobs.c.state == SCHEDULED, due_jobs.c.turn == 0)

# claim_dealt: the rounds come first, by round, then due time; the rows not dealt
# follow in due order (CLAIM_DUE): the noisy user's bulk still gets every idle slot.
CLAIM_DEALT = (select(due_jobs.c.job_key, due_jobs.c.task_id, due_jobs.c.args,
                      due_jobs.c.due_at, due_jobs.c.token)
               .where(DEALT_OF)  # all due: a write that moves a row's time makes it 0
               .order_by(due_jobs.c.turn, due_jobs.c.due_at)
               .limit(bindparam("limit")).with_for_update(skip_locked=True))
# lowest_round / highest_round: the first and last entry of ix_due_jobs_dealt.
LOWEST_ROUND = (select(due_jobs.c.turn).where(DEALT_OF)
                .order_by(due_jobs.c.turn, due_jobs.c.due_at).limit(1))
HIGHEST_ROUND = (select(due_jobs.c.turn).where(DEALT_OF)
                 .order_by(due_jobs.c.turn.desc(), due_jobs.c.due_at.desc()).limit(1))
# oldest_dealt: the first entry of ix_due_jobs_dealt_due (the bucket's lag counts it).
OLDEST_DEALT = select(due_jobs.c.due_at).where(DEALT_OF).order_by(due_jobs.c.due_at).limit(1)
# dealt_capped: dealt rows (all due) counted through ix_due_jobs_dealt_due, at most cap.
DEALT_CAPPED = select(func.count()).select_from(
    select(due_jobs.c.job_key).where(DEALT_OF).limit(bindparam("cap")).subquery())

# counter_total: one per-bucket running total (due_counters' primary key).
COUNTER_TOTAL = select(due_counters.c.value).where(due_counters.c.bucket == bindparam("bucket"),
                                                 due_counters.c.name == bindparam("name"))


def user_of(dialect: str) -> ColumnElement[str]:
    """A row's user id, in the text ``ix_due_jobs_user`` indexes (schema.USER_SQL)."""
    return literal_column(USER_SQL[dialect])


def window(dialect: str) -> Select[Any]:
    """due_window: the first ``limit`` due rows not dealt from ``start`` on (a range of the
    drain index), in claim order, with their user and due time: what a look weighs."""
    return (select(due_jobs.c.job_key, user_of(dialect), due_jobs.c.due_at)
            .where(UNDEALT_OF, due_jobs.c.due_at >= bindparam("start", type_=UtcDateTime()),
                   due_jobs.c.due_at <= _NOW)
            .order_by(due_jobs.c.due_at).limit(bindparam("limit")))


def due_group(dialect: str) -> Select[Any]:
    """due_group: every due row not dealt, due at exactly ``at`` (rows written at one
    instant: a window never ends inside it)."""
    return (select(due_jobs.c.job_key, user_of(dialect), due_jobs.c.due_at)
            .where(UNDEALT_OF, due_jobs.c.due_at == bindparam("at", type_=UtcDateTime())))


def dealt_users(dialect: str) -> Select[Any]:
    """dealt_users: the users of the first ``limit`` dealt rows in round order, and how
    many rows each (the next rounds' users)."""
    first = (select(user_of(dialect).label("user_id")).where(DEALT_OF)
             .order_by(due_jobs.c.turn, due_jobs.c.due_at).limit(bindparam("limit"))
             .subquery())
    return select(first.c.user_id, func.count()).group_by(first.c.user_id)


# deal_rows (PostgreSQL): each key to its round, in one statement (two arrays), but rows
# claimed, dealt or written again meanwhile, or held by a claim in flight: SKIP LOCKED,
# so the deal never waits and never deadlocks with a producer's or an operator's batch.
_KEYS = bindparam("keys", type_=postgresql.ARRAY(Text()))
_PAIRS = func.unnest(_KEYS, bindparam("turns", type_=postgresql.ARRAY(Integer()))
                     ).table_valued("k", "t").render_derived(name="v")
_FREE = (select(due_jobs.c.job_key)
         .where(due_jobs.c.job_key == any_(_KEYS), due_jobs.c.state == SCHEDULED,
                due_jobs.c.turn == 0)
         .with_for_update(skip_locked=True))
DEAL_ROWS_PG = (update(due_jobs)  # = ANY(ARRAY(...)): a primary key probe per row, always
                .where(due_jobs.c.job_key == any_(func.array(_FREE.scalar_subquery())),
                       due_jobs.c.job_key == _PAIRS.c.k)
                .values(turn=_PAIRS.c.t))
# deal_row (SQLite, executemany): one key to its round.
DEAL_ROW = (update(due_jobs).where(due_jobs.c.job_key == bindparam("k"),
                                   due_jobs.c.state == SCHEDULED, due_jobs.c.turn == 0)
            .values(turn=bindparam("t")))


def undeal(bucket: str, limit: int) -> Update:
    """undeal: up to ``limit`` of ``bucket``'s dealt rows back in due order (a scheduler
    started with fair share off)."""
    pick = (select(due_jobs.c.job_key)
            .where(due_jobs.c.bucket == bucket, due_jobs.c.state == SCHEDULED,
                   due_jobs.c.turn != 0)
            .limit(limit).with_for_update(skip_locked=True))
    return (update(due_jobs).where(due_jobs.c.job_key.in_(pick.scalar_subquery()),
                                   due_jobs.c.state == SCHEDULED)
            .values(turn=0))


def scheduled_in_due_order(hit: Any, where: list[Any], order: tuple[Any, ...],
                           steps: int) -> Select[Any]:
    """list_scheduled: a page of a bucket's scheduled rows in due order, dealt ones
    included: a bounded walk of the drain index merged with one of
    ``ix_due_jobs_dealt_due`` (each at most ``steps`` rows)."""
    parts = [select(*COLUMNS, hit.label("hit")).where(*where, part).order_by(*order)
             .limit(steps).subquery()
             for part in (due_jobs.c.turn == 0, due_jobs.c.turn != 0)]
    merged = union_all(*(select(p) for p in parts)).subquery()
    return (select(merged).order_by(*(merged.c[c.name] for c in order)).limit(steps))
