"""What a copy in a ``.dead`` queue says about its job, decided from durable state.

A scheduler-dispatched copy carries its dispatch (job key, token, lease
stamp). Its row says whether that dispatch is still the job's live one and
whether a worker ever moved its lease: a failed run moves it (5 s, so the job
comes back soon) and the last delivery a quorum queue allows moves it before
it runs (tasks/settle.py ``last_chance``). So:

- row gone, or no dispatch header: KEEP, the record of a job that ended;
- a later dispatch, or scheduled again: DROP, the live dispatch decides;
- this dispatch, lease never moved, ``delivery_limit``: REDISPATCH, returned by
  consumers that died or lost their connection, never run to its end: not the
  message's failure;
- this dispatch, lease moved, ``delivery_limit``: BURY, its last delivery
  started a run that died: poison;
- this dispatch, lease never moved, ``expired`` or ``maxlen``: REDISPATCH, the
  broker dropped it from the queue unrun (an operator's ``message-ttl`` or
  ``max-length`` policy on the bucket queue), not the job's failure;
- this dispatch, ``rejected`` (or any other reason): WATCH, a failed run; the
  row comes back by its lease, the copy goes once the job moved on.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from scheduler.store.schema import DISPATCHED
from scheduler.wire import Dispatch, micros

#: The broker's x-death reason of a copy returned more often than the queue allows.
DELIVERY_LIMIT = "delivery_limit"
#: The x-death reasons of a copy the broker dropped from its queue without delivering it:
#: its ``message-ttl`` ran out, or a ``max-length`` policy dropped the queue's head.
DROPPED_UNRUN = frozenset({"expired", "maxlen"})


class Verdict(Enum):
    """What the dead-letter sweep does with one dead copy."""

    #: A failure of a job that no longer exists (or not ours to judge): stays in ``.dead``.
    KEEP = "kept"
    #: A failed run of a live job: stays until the job moves on, then is dropped.
    WATCH = "watched"
    #: A stale copy of a live job: removed (replaying it would be dropped anyway).
    DROP = "dropped"
    #: Never ran to its end: its row is made due now, the copy removed.
    REDISPATCH = "dispatched again"
    #: Killed its worker on its last delivery: the job is dead-lettered.
    BURY = "dead-lettered"


#: Verdicts whose copy leaves the ``.dead`` queue.
REMOVED = frozenset({Verdict.DROP, Verdict.REDISPATCH, Verdict.BURY})


@dataclass(frozen=True)
class RowState:
    """The durable state a verdict reads: the row's token, due time (a dispatched
    row's lease end) and state."""

    token: int
    due_at: datetime
    state: int

    def is_live(self, copy: Dispatch) -> bool:
        """Whether ``copy``'s dispatch is still this row's live one (its token)."""
        return self.state == DISPATCHED and self.token == copy.token

    def lease_moved(self, copy: Dispatch) -> bool:
        """Whether a worker moved the lease the copy was dispatched with."""
        return copy.lease_us is not None and micros(self.due_at) != copy.lease_us


def verdict(reason: str, copy: Dispatch | None, row: RowState | None) -> Verdict:
    """The verdict on one dead copy (see the module's table)."""
    if copy is None or row is None:
        return Verdict.KEEP
    if not row.is_live(copy):
        return Verdict.DROP
    if reason == DELIVERY_LIMIT:
        return Verdict.BURY if row.lease_moved(copy) else Verdict.REDISPATCH
    if reason in DROPPED_UNRUN and not row.lease_moved(copy):
        return Verdict.REDISPATCH
    return Verdict.WATCH
