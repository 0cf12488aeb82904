"""The lateness of a stored run and the resequencer's hold: what each observes, and
that a process names a bounded number of destinations."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

from prometheus_client import REGISTRY

from routing.reseq import hold
from routing.reseq.state import Next
from scheduler.wire import Dispatch
from tasks.distlock.job import PARKED_RESULT
from tasks.flow.rate_limit import DEFERRED_RESULT
from tasks.metrics.worker_hooks import lateness
from tasks.settle import RUN_STATE, RunState

DUE = 1_800_000_000.0


def request(started_at: float | None, due_us: int | None = int(DUE * 1e6)) -> Any:
    run = RunState(dispatch=Dispatch("job-1", 3, 1, due_us), started_at=started_at)
    return SimpleNamespace(**{RUN_STATE: run})


def test_lateness_is_the_due_time_to_the_start_of_the_run() -> None:
    assert lateness(request(DUE + 90.5), {"ok": True}) == 90.5
    assert lateness(request(DUE - 30), None) == 0.0  # pulled forward: not late


def test_deliveries_that_did_not_start_their_run_have_no_lateness() -> None:
    assert lateness(request(None), None) is None  # a stale copy, dropped unrun
    assert lateness(request(DUE + 5, due_us=None), None) is None  # no due time on record
    assert lateness(SimpleNamespace(), None) is None  # not from the store
    assert lateness(request(DUE + 5), f"{PARKED_RESULT} user=u #2") is None
    assert lateness(request(DUE + 5), f"{DEFERRED_RESULT} until ...") is None


def test_hold_is_arrival_to_send_on_redis_clock() -> None:
    name = f"d-{uuid.uuid4().hex[:8]}"
    before = REGISTRY.get_sample_value("recur_resequencer_hold_seconds_count",
                                       {"destination": name}) or 0.0
    nxt = Next(seq=1, pending={"t": 1_000, "id": "m1"}, entry={"id": "m1"}, now_ms=3_500,
               buffered=1, outage=False)
    hold.observe_hold(name, nxt, top=10_000)
    labels = {"destination": name}
    assert REGISTRY.get_sample_value("recur_resequencer_hold_seconds_count", labels) == before + 1
    assert REGISTRY.get_sample_value("recur_resequencer_hold_seconds_bucket",
                                     {**labels, "le": "5.0"}) == 1
    assert REGISTRY.get_sample_value("recur_resequencer_hold_seconds_bucket",
                                     {**labels, "le": "1.0"}) == 0


def test_a_process_names_at_most_top_destinations_then_other() -> None:
    top = len(hold._named) + 2
    names = [f"d-{uuid.uuid4().hex[:8]}" for _ in range(4)]
    labels = [hold.label(n, top) for n in names]
    assert labels == [names[0], names[1], hold.OTHER, hold.OTHER]
    assert hold.label(names[0], top) == names[0]  # a named one keeps its name
