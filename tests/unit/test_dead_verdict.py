"""The dead-letter sweep's verdicts (scheduler/dead_verdict.py), and the dispatch a
dead copy's headers carry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scheduler.dead_verdict import DELIVERY_LIMIT, RowState, Verdict, verdict
from scheduler.store.schema import DISPATCHED, SCHEDULED
from scheduler.wire import DISPATCH_HEADER, Dispatch, dispatch_in, micros

LEASE = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
COPY = Dispatch("job-1", 7, micros(LEASE))


def row(token: int = 7, lease: datetime = LEASE, state: int = DISPATCHED) -> RowState:
    return RowState(token, lease, state)


@pytest.mark.parametrize(("reason", "state", "expected"), [
    (DELIVERY_LIMIT, row(), Verdict.REDISPATCH),  # returned by dying consumers, never ran
    (DELIVERY_LIMIT, row(lease=LEASE - timedelta(minutes=29)), Verdict.BURY),  # last run died
    ("rejected", row(lease=LEASE - timedelta(minutes=29)), Verdict.WATCH),  # failed run
    ("rejected", row(), Verdict.WATCH),  # failed for good: left to its lease
    (DELIVERY_LIMIT, row(token=8), Verdict.DROP),  # dispatched again since
    ("rejected", row(state=SCHEDULED), Verdict.DROP),  # rescheduled since
    (DELIVERY_LIMIT, None, Verdict.KEEP),  # the job ended: the copy is its record
    ("expired", row(), Verdict.REDISPATCH),  # a message-ttl policy dropped it unrun
    ("maxlen", row(), Verdict.REDISPATCH),  # a max-length policy dropped it unrun
    ("expired", row(lease=LEASE - timedelta(minutes=29)), Verdict.WATCH),  # a run started
])
def test_a_dead_copy_is_judged_by_its_row(reason: str, state: RowState | None,
                                          expected: Verdict) -> None:
    assert verdict(reason, COPY, state) is expected


def test_a_copy_without_a_dispatch_is_kept() -> None:
    assert verdict(DELIVERY_LIMIT, None, row()) is Verdict.KEEP


def test_a_dead_copys_headers_give_its_dispatch_and_a_bad_header_none() -> None:
    header = {DISPATCH_HEADER: ["job-1", 7, micros(LEASE), None]}
    assert dispatch_in(header) == COPY
    assert dispatch_in({}) is None
    assert dispatch_in({DISPATCH_HEADER: ["job-1", "seven", 1]}) is None
    assert dispatch_in({DISPATCH_HEADER: 5}) is None
