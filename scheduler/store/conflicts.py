"""A transaction the server rolled back for a concurrent one's sake, run again.

PostgreSQL ends a transaction with 40P01 when two wait for each other's rows, and with
40001 when a stricter isolation than READ COMMITTED (which recur's connections set:
scheduler/store/connection.py) meets a concurrent write. What it did was undone, so
running it again is safe and succeeds once the other transaction is done.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

import psycopg

#: 40001 (serialization failure) and 40P01 (deadlock detected).
CONFLICTS = (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected)
#: Times :func:`rerun_conflicts` runs a transaction the server keeps rolling back so.
CONFLICT_ATTEMPTS = 8
#: Longest pause (seconds) before the next attempt, times the attempts so far (random:
#: the writers that collided do not collide again in step).
CONFLICT_PAUSE = 0.005

T = TypeVar("T")


def is_conflict(exc: BaseException) -> bool:
    """Whether ``exc`` (a driver's error, or ours from one) is one of :data:`CONFLICTS`."""
    for error in (exc, exc.__cause__):
        if isinstance(getattr(error, "orig", error), CONFLICTS):
            return True
    return False


def rerun_conflicts(work: Callable[[], T], attempts: int = CONFLICT_ATTEMPTS) -> T:
    """``work()`` (one whole transaction, or one autocommitted statement), run again when the
    server rolled it back for a concurrent transaction's sake (:data:`CONFLICTS`): what it
    did was undone, so a caller never sees a conflict it could not have caused. Raised
    after ``attempts`` runs."""
    for attempt in range(1, attempts + 1):
        try:
            return work()
        except Exception as exc:
            if attempt == attempts or not is_conflict(exc):
                raise
        time.sleep(random.uniform(0, CONFLICT_PAUSE * attempt))
    raise AssertionError("unreachable: the last attempt returns or raises")
