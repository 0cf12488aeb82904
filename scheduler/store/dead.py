"""The due-jobs store's statements for the dead-letter sweep (scheduler/dead_sweep.py).

Each write locks the row and checks the copy's dispatch again inside its
transaction (the sweep's verdict was read a moment before): a row that moved
on meanwhile is left alone. The writes are durable (the scheduler's
transactions keep ``synchronous_commit`` on).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection

from scheduler.dead_verdict import RowState
from scheduler.refusals import Published
from scheduler.store import operator_queries as q
from scheduler.store.base import StoreCore
from scheduler.store.records import DEAD_LETTERED, RECOVERED, Claimed
from scheduler.wire import Dispatch

#: Publishes one job's dead letter (with its reason) and returns once confirmed: None,
#: or the row refused (its dead letter cannot be built or sent: it is set aside).
DeadPublisher = Callable[[list[Claimed], str], Published | None]


class DeadCopies:
    """Reads and writes the rows behind dead copies, through one store."""

    def __init__(self, store: StoreCore) -> None:
        self.store = store

    def rows(self, keys: Collection[str]) -> dict[str, RowState]:
        """The state of each existing row among ``keys`` (one statement)."""
        if not keys:
            return {}
        with self.store.transaction("read the rows of dead copies") as conn:
            found = conn.execute(q.dead_copy_rows(self.store.dialect, sorted(keys)))
            return {r.job_key: RowState(int(r.token), r.due_at, int(r.state)) for r in found}

    def _locked(self, conn: Connection, copy: Dispatch) -> Any:
        """The row of ``copy``'s job, locked, if ``copy`` is still its live dispatch."""
        row = conn.execute(q.locked_dispatch(copy.job_key)).first()
        if row is None or not RowState(row.token, row.due_at, row.state).is_live(copy):
            return None
        return row

    def dispatch_again(self, copy: Dispatch, now: datetime) -> str | None:
        """Make the job of a copy that never ran due now (its next dispatch gets a new
        token); returns its bucket, or None when the row moved on or a worker moved
        its lease meanwhile. Counted with the recovered leases."""
        with self.store.transaction("dispatch a dead-lettered copy's job again") as conn:
            row = self._locked(conn, copy)
            if row is None or RowState(row.token, row.due_at, row.state).lease_moved(copy):
                return None
            conn.execute(q.redispatch_dead_copy(copy.job_key, now))
            self.store.add_counters(conn, RECOVERED, Counter({row.bucket: 1}))
        return str(row.bucket)

    def bury(self, copy: Dispatch, reason: str, publish: DeadPublisher) -> str | None:
        """Dead-letter the job of a copy that killed its worker on its last delivery:
        publish its plain dead letter (confirmed), then delete the row, in one
        transaction (a crash in between leaves a duplicate dead letter, never a
        loss). Returns its bucket, or None when the row moved on meanwhile. A row
        whose dead letter the publisher refused is set aside instead (kept)."""
        with self.store.transaction("dead-letter a job that killed its worker") as conn:
            row = self._locked(conn, copy)
            if row is None or not RowState(row.token, row.due_at, row.state).lease_moved(copy):
                return None
            claimed = Claimed(job_key=row.job_key, task=self.store.task_name(conn, row.task_id),
                              bucket=row.bucket, args=row.args, due_at=row.due_at,
                              token=row.token, lease_until=row.due_at, attempts=row.attempts)
            outcome = publish([claimed], reason)
            if outcome and copy.job_key in outcome.refused:
                self.store.put_aside(conn.execute, [(claimed, outcome.refused[copy.job_key])],
                                     datetime.now(UTC))
                return str(row.bucket)
            conn.execute(q.bury_job(copy.job_key))
            self.store.add_counters(conn, DEAD_LETTERED, Counter({row.bucket: 1}))
        return str(row.bucket)
