"""What the store hands out and takes in: jobs to schedule, claimed rows, bucket readings.

Plain values with no database in them, so the scheduler, the publisher and the
status views can use them without a connection.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from scheduler.refusals import Published, Refusal

#: Counter of rows whose lease ran out and that were put back to be dispatched again.
RECOVERED = "leases_recovered"
#: Counter of poison jobs moved to their dead-letter queue (out of attempts).
DEAD_LETTERED = "dead_lettered"
#: Longest reason kept for a set-aside row.
MAX_REASON = 1000


@dataclass(frozen=True)
class Job:
    """A job to schedule: ``args`` is JSON text ``{"args": [...], "kwargs": {...}}``."""

    job_key: str
    task: str
    bucket: str
    args: str
    due_at: datetime
    #: The pull-forward floor (scheduler/pullforward.py); None: no floor.
    early_at: datetime | None = None


@dataclass(frozen=True)
class Claimed:
    """A row claimed for dispatch: its message carries ``token`` and ``lease_until``.

    The token alone can repeat: a dispatch whose transaction rolled back after
    publishing (scheduler killed, confirm lost) leaves copies with the token
    the next dispatch gives again. The lease stamp differs, so the pair
    identifies one dispatch.
    """

    job_key: str
    task: str
    bucket: str
    args: str
    due_at: datetime
    token: int
    lease_until: datetime
    #: Dispatches without a finish or reschedule (set for dead-lettered rows).
    attempts: int = 0


@dataclass(frozen=True)
class BucketStats:
    """What ``recur status`` shows for one bucket."""

    bucket: str
    scheduled: int
    due: int
    oldest_due_at: datetime | None
    dispatched: int
    expired: int
    recovered: int
    dead_lettered: int = 0
    #: Rows set aside (state SET_ASIDE): the broker cannot take their messages.
    set_aside: int = 0
    #: Fields that are estimates (``scheduled``: PostgreSQL's, scheduler/store/estimates.py).
    estimated: tuple[str, ...] = ()
    #: Fields that are lower bounds: counting stopped at a cap (``due``, ``scheduled``,
    #: ``set_aside``).
    at_least: tuple[str, ...] = ()


@dataclass(frozen=True)
class BucketHead:
    """A bucket at a glance, read cheaply (:meth:`DueStore.heads`)."""

    bucket: str
    oldest_scheduled_at: datetime | None
    due: int
    #: ``due`` reached the cap: there are at least that many.
    due_capped: bool
    dispatched: int
    recovered: int
    dead_lettered: int


#: Publishes claimed rows and returns only once the broker confirmed all of them: None,
#: or the rows it refused (set aside) and the lease stamps that changed.
Publisher = Callable[[list[Claimed]], Published | None]
#: Runs one statement in the caller's transaction (psycopg's ``run`` or SQLAlchemy's).
Execute = Callable[[Any, dict[str, Any]], Any]


def refused_rows(rows: list[Claimed], outcome: Published | None
                 ) -> list[tuple[Claimed, Refusal]]:
    """The rows a publish refused, with why."""
    if not outcome or not outcome.refused:
        return []
    return [(row, outcome.refused[row.job_key]) for row in rows
            if row.job_key in outcome.refused]


def leases_of(rows: list[Claimed], lease_until: datetime, outcome: Published | None
              ) -> dict[datetime, list[str]]:
    """The published rows' keys by the lease stamp their confirmed copy carries."""
    if not outcome:
        return {lease_until: [row.job_key for row in rows]}
    found: dict[datetime, list[str]] = {}
    for row in rows:
        if row.job_key not in outcome.refused:
            lease = outcome.leases.get(row.job_key, lease_until)
            found.setdefault(lease, []).append(row.job_key)
    return found
