"""When an idle scheduler must look again: the next moment a row it knows of needs it,
and whether any row can be claimed now at all.

An idle scheduler sleeps longer than ``RECUR_SCHEDULER_INTERVAL`` (scheduler/idle.py),
but never past the earliest of: a scheduled row's due time, for a pull-forward
bucket a scheduled row's floor (``early_at``), a dispatched row's lease end. One
statement of bounded index reads (each the first entry past ``now`` of a partial index:
ix_due_jobs_scheduled, ix_due_jobs_early, ix_due_jobs_leased), whatever the population.
The second, :func:`claimable`, lets an idle pass skip the buckets' fills (a dozen round
trips to the store and the broker that would claim nothing) with one statement.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, bindparam, exists, func, literal_column, or_, select
from sqlalchemy.sql import Select

from scheduler.store.base import StoreCore
from scheduler.store.schema import DISPATCHED, SCHEDULED, UtcDateTime, due_jobs

_NOW = bindparam("now", type_=UtcDateTime())
_COL = due_jobs.c


def _first(column: ColumnElement[datetime], *where: ColumnElement[bool]
           ) -> ColumnElement[datetime]:
    return select(func.min(column)).where(and_(*where), column > _NOW).scalar_subquery()


def next_wake_statement(buckets: Sequence[str], early: Sequence[str]
                        ) -> Select[*tuple[Any, ...]]:
    """One row: per bucket its next due time, per pull-forward bucket its next floor,
    and the next lease end (constants as literals, so the partial indexes match)."""
    state: ColumnElement[int] = literal_column(str(SCHEDULED))
    parts = [_first(_COL.due_at, _COL.bucket == b, _COL.state == state,
                    _COL.turn == literal_column("0")) for b in buckets]
    parts += [_first(_COL.early_at, _COL.bucket == b, _COL.state == state) for b in early]
    parts.append(_first(_COL.due_at, _COL.state == literal_column(str(DISPATCHED))))
    return select(*parts)


def next_wake(store: StoreCore, buckets: Sequence[str], early: Sequence[str],
              now: datetime) -> datetime | None:
    """The earliest moment after ``now`` a row needs the scheduler (None: no such row)."""
    with store.transaction("read when the next row falls due") as conn:
        row = conn.execute(next_wake_statement(buckets, early), {"now": now}).one()
    times = [t for t in row if isinstance(t, datetime)]
    return min(times) if times else None


def claimable_statement(buckets: Sequence[str], early: Sequence[str]) -> Select[tuple[bool]]:
    """One boolean: a scheduled row of one of ``buckets`` is due (or dealt back: those
    are all due), or one of a pull-forward bucket's has its floor passed."""
    state: ColumnElement[int] = literal_column(str(SCHEDULED))
    undealt, dealt = _COL.turn == literal_column("0"), _COL.turn != literal_column("0")
    probes = [exists().where(_COL.bucket == b, _COL.state == state, undealt, _COL.due_at <= _NOW)
              for b in buckets]
    probes += [exists().where(_COL.bucket == b, _COL.state == state, dealt) for b in buckets]
    probes += [exists().where(_COL.bucket == b, _COL.state == state, _COL.early_at <= _NOW)
               for b in early]
    return select(or_(*probes))


def claimable(store: StoreCore, buckets: Sequence[str], early: Sequence[str],
              now: datetime) -> bool:
    """Whether a fill of one of ``buckets`` at ``now`` could claim a row."""
    with store.transaction("read whether a row can be claimed") as conn:
        return bool(conn.execute(claimable_statement(buckets, early), {"now": now}).scalar())
