"""Every statement the store sends to the due-jobs tables, each named once.

A constant is a statement with bound parameters; a function builds one whose
shape depends on its arguments (a dialect, a list of keys, a filter). Only the
store's modules run them. The operators' statements are in ``operator_queries.py``;
those the drivers take as plain text (sessions, COPY, advisory locks, server
settings) in ``text_queries.py``.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
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
from sqlalchemy.sql import Delete, Select, Update, column, table

from scheduler.store.schema import (
    DISPATCHED,
    NEXT_ATTEMPT,
    NEXT_RUN,
    NEXT_TOKEN,
    SCHEDULED,
    SET_ASIDE,
    UtcDateTime,
    due_counters,
    due_jobs,
    due_set_aside,
    due_tasks,
    periodic_entries,
)

Statement = Select[Any] | Update | Delete


def insert_of(dialect: str) -> Any:
    """The dialect's INSERT with ON CONFLICT support."""
    return (postgresql if dialect == "postgresql" else sqlite).insert


def key_in(dialect: str, keys: list[str]) -> Any:
    """``job_key`` is one of ``keys``: on PostgreSQL one array parameter (``= ANY``),
    which the driver sends as is, instead of a thousand placeholders to parse."""
    if dialect == "postgresql":
        return due_jobs.c.job_key == any_(bindparam("keys", keys,
                                                    type_=postgresql.ARRAY(Text())))
    return due_jobs.c.job_key.in_(keys)


# -- the worker's per-job statements ----------------------------------------------
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
         early_at=bindparam("early", type_=UtcDateTime()), runs=NEXT_RUN,
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
#: The worker's writes that commit without waiting for the WAL flush: a database crash
#: may lose them, so each process writes its recent ones again after a restart.
JOURNALED = (RESCHEDULE, FINISH, SET_LEASE)

# -- the scheduler's dispatch -------------------------------------------------------
# claim_rows: the earliest due scheduled rows of one bucket (ix_due_jobs_scheduled: not
# dealt into rounds: fair_queries.py), skipping rows another scheduler holds; claim_early:
# the scheduled rows whose floor has passed, those that became eligible first (rows
# that never ran: earliest due first): one range of ix_due_jobs_early, whatever
# the population. Ordering every eligible row by due time instead would sort up
# to the whole bucket each pass.
_CLAIM = (select(due_jobs.c.job_key, due_jobs.c.task_id, due_jobs.c.args, due_jobs.c.due_at,
                 due_jobs.c.token)
          .limit(bindparam("limit")).with_for_update(skip_locked=True))
_SCHEDULED_OF = (due_jobs.c.bucket == bindparam("bucket"), due_jobs.c.state == SCHEDULED)
_NOW = bindparam("now", type_=UtcDateTime())
CLAIM_DUE = _CLAIM.where(*_SCHEDULED_OF, due_jobs.c.turn == 0, due_jobs.c.due_at <= _NOW
                         ).order_by(due_jobs.c.due_at)
CLAIM_EARLY = _CLAIM.where(*_SCHEDULED_OF, due_jobs.c.early_at <= _NOW).order_by(
    due_jobs.c.early_at, due_jobs.c.due_at)
# mark_dispatched: new token, due again when the lease ends, one more attempt; turn 0.
MARK_DISPATCHED = update(due_jobs).where(
    due_jobs.c.job_key == any_(bindparam("keys", type_=postgresql.ARRAY(Text())))).values(
    state=DISPATCHED, token=NEXT_TOKEN, turn=0, attempts=NEXT_ATTEMPT,
    due_at=bindparam("lease", type_=UtcDateTime()), updated_at=_NOW)


def mark_dispatched_in(dialect: str, keys: list[str], lease: Any, now: Any) -> Update:
    """mark_dispatched (SQLite): as MARK_DISPATCHED, with IN for the keys."""
    return (update(due_jobs).where(key_in(dialect, keys))
            .values(state=DISPATCHED, token=NEXT_TOKEN, turn=0, due_at=lease,
                    attempts=NEXT_ATTEMPT, updated_at=now))


# set_aside_row: a row the broker cannot take leaves every index (state 2), and
# record_set_aside says why (one row each: setting rows aside is rare).
SET_ASIDE_ROW = update(due_jobs).where(due_jobs.c.job_key == bindparam("key")).values(
    state=SET_ASIDE, turn=0, updated_at=bindparam("now", type_=UtcDateTime()))


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
# writes may be lost (scheduler/store/journal.py).
_ARCHIVER = table("pg_stat_archiver", column("stats_reset"))
SERVER_STARTED = select(func.pg_postmaster_start_time(),
                        select(_ARCHIVER.c.stats_reset).scalar_subquery())


# -- producers and task names -------------------------------------------------------
def upsert_jobs(dialect: str) -> Any:
    """upsert_job: insert, or refresh what/when of an existing key."""
    stmt = insert_of(dialect)(due_jobs)
    new = stmt.excluded
    state, aside = due_jobs.c.state, due_jobs.c.state == SET_ASIDE
    return stmt.on_conflict_do_update(
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
              "attempts": case((aside, 0), else_=due_jobs.c.attempts), "turn": 0,
              "updated_at": new.updated_at})


# task_codes: every registered task name with its code.
TASK_CODES = select(due_tasks.c.code, due_tasks.c.name)


def register_tasks(dialect: str) -> Any:
    """register_tasks: new names get the next codes (a racing process's win is kept)."""
    return insert_of(dialect)(due_tasks).on_conflict_do_nothing(
        index_elements=[due_tasks.c.name])


#: seed_insert (SQLite): the seed's idempotent insert (PostgreSQL COPYs: text_queries.py).
SEED_INSERT_SQLITE = sqlite.insert(due_jobs).on_conflict_do_nothing(index_elements=["job_key"])

# -- leases that ran out ------------------------------------------------------------
def poison_leases(now: Any, max_attempts: int, limit: int) -> Select[Any]:
    """poison_leases: expired dispatched rows out of attempts, not held elsewhere."""
    return (select(due_jobs.c.job_key, due_jobs.c.task_id, due_jobs.c.bucket,
                   due_jobs.c.args, due_jobs.c.due_at, due_jobs.c.token,
                   due_jobs.c.attempts)
            .where(due_jobs.c.state == DISPATCHED, due_jobs.c.due_at < now,
                   due_jobs.c.attempts >= max_attempts)
            .order_by(due_jobs.c.due_at).limit(limit)
            .with_for_update(skip_locked=True))


def drop_poison(keys: list[str]) -> Delete:
    """drop_poison: the rows just dead-lettered (still locked by us)."""
    return delete(due_jobs).where(due_jobs.c.job_key.in_(keys),
                                  due_jobs.c.state == DISPATCHED)


def recover_leases(now: Any, limit: int, max_attempts: int | None) -> Update:
    """recover_leases: dispatched rows past their lease (expired_leases: not held by
    another scheduler, under ``max_attempts``) back to scheduled; their buckets."""
    conditions = [due_jobs.c.state == DISPATCHED, due_jobs.c.due_at < now]
    if max_attempts is not None:
        conditions.append(due_jobs.c.attempts < max_attempts)
    expired = (select(due_jobs.c.job_key)
               .where(*conditions)
               .order_by(due_jobs.c.due_at).limit(limit)
               .with_for_update(skip_locked=True))
    return (update(due_jobs)
            .where(due_jobs.c.job_key.in_(expired.scalar_subquery()),
                   due_jobs.c.state == DISPATCHED)
            .values(state=SCHEDULED, updated_at=now)
            .returning(due_jobs.c.bucket))


def bump_counters(dialect: str) -> Any:
    """bump_counter: add to a per-bucket running total."""
    stmt = insert_of(dialect)(due_counters)
    return stmt.on_conflict_do_update(
        index_elements=[due_counters.c.bucket, due_counters.c.name],
        set_={"value": due_counters.c.value + stmt.excluded.value})


# counter_totals: every per-bucket running total (a tiny table).
COUNTER_TOTALS = select(due_counters.c.bucket, due_counters.c.name, due_counters.c.value)


# -- periodic entries ---------------------------------------------------------------
def drop_periodic(names: list[str]) -> Delete:
    """drop_periodic: entries no longer configured."""
    return delete(periodic_entries).where(periodic_entries.c.name.not_in(names))


def upsert_periodic(dialect: str) -> Any:
    """upsert_periodic: keep next_run_at unless the schedule changed."""
    t = periodic_entries
    stmt = insert_of(dialect)(t)
    ex = stmt.excluded
    return stmt.on_conflict_do_update(
        index_elements=[t.c.name],
        set_={"task": ex.task, "bucket": ex.bucket, "args": ex.args,
              "schedule": ex.schedule,
              "next_run_at": case((t.c.schedule == ex.schedule,
                                   t.c.next_run_at), else_=ex.next_run_at)})


def due_periodic(now: Any) -> Select[Any]:
    """due_periodic: entries whose next run came, not held by another scheduler."""
    return (select(periodic_entries).where(periodic_entries.c.next_run_at <= now)
            .with_for_update(skip_locked=True))


def fire_periodic(dialect: str) -> Any:
    """fire_periodic: the period's job (idempotent); ``next_periodic`` follows it."""
    return insert_of(dialect)(due_jobs).on_conflict_do_nothing(
        index_elements=[due_jobs.c.job_key])


def next_periodic(name: str, next_run_at: Any, last_run_at: Any) -> Update:
    """next_periodic: the entry's next run, after it fired."""
    return update(periodic_entries).where(periodic_entries.c.name == name).values(
        next_run_at=next_run_at, last_run_at=last_run_at)


# -- readings -----------------------------------------------------------------------
def bucket_stats(now: Any) -> Select[Any]:
    """bucket_stats: scheduled, due, oldest due, dispatched, expired per bucket."""
    state, due_at = due_jobs.c.state, due_jobs.c.due_at

    def count(cond: Any) -> Any:
        return func.coalesce(func.sum(case((cond, 1), else_=0)), 0)

    is_due = and_(state == SCHEDULED, due_at <= now)
    return select(
        due_jobs.c.bucket, count(state == SCHEDULED), count(is_due),
        type_coerce(func.min(case((is_due, due_at), else_=None)), UtcDateTime()),
        count(state == DISPATCHED), count(and_(state == DISPATCHED, due_at < now)),
        count(state == SET_ASIDE)).group_by(due_jobs.c.bucket)


_SCHEDULED_IN = and_(*_SCHEDULED_OF, due_jobs.c.turn == 0)  # dealt rows: fair_queries.py
# oldest_scheduled: the drain index's first entry for the bucket.
OLDEST_SCHEDULED = select(due_jobs.c.due_at).where(_SCHEDULED_IN).order_by(
    due_jobs.c.due_at).limit(1)
# due_capped: due rows counted through the drain index, at most due_cap.
DUE_CAPPED = select(func.count()).select_from(select(due_jobs.c.job_key).where(
    _SCHEDULED_IN, due_jobs.c.due_at <= bindparam("now", type_=UtcDateTime())
).limit(bindparam("cap")).subquery())
# dispatched_per_bucket: rows in flight, through the lease index.
DISPATCHED_PER_BUCKET = (select(due_jobs.c.bucket, func.count())
                         .where(due_jobs.c.state == DISPATCHED).group_by(due_jobs.c.bucket))

