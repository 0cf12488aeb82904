"""Riding out an outage in place; the scheduler's reconnect waits."""

from __future__ import annotations

import pytest

from config.errors import StoreError, StoreUnavailable
from config.settings import load_settings
from scheduler.outages import LONGEST_WAIT, MAX_BACKOFF, Backoff, budget_for, ride_out


class Flaky:
    """Fails ``failures`` times with StoreUnavailable, then answers."""

    def __init__(self, failures: int, error: Exception | None = None) -> None:
        self.failures, self.calls = failures, 0
        self.error = error or StoreUnavailable("database down")

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "done"


def test_an_outage_shorter_than_the_budget_is_ridden_out_with_growing_waits() -> None:
    waits: list[float] = []
    call = Flaky(5)
    assert ride_out("check", call, budget=60, sleep=waits.append) == "done"
    assert call.calls == 6
    assert waits == sorted(waits) and waits[0] < waits[-1] <= LONGEST_WAIT


def test_the_last_error_is_raised_when_the_budget_is_spent() -> None:
    call = Flaky(10**6)
    with pytest.raises(StoreUnavailable):
        ride_out("check", call, budget=0.05, sleep=lambda s: None)


def test_an_error_that_is_not_an_outage_is_not_retried() -> None:
    call = Flaky(1, StoreError("syntax error"))
    with pytest.raises(StoreError):
        ride_out("check", call, budget=60, sleep=lambda s: None)
    assert call.calls == 1


def test_the_budget_is_at_most_half_the_bucket_soft_time_limit() -> None:
    cfg = load_settings({"RECUR_OUTAGE_BUDGET": "100"})
    assert budget_for(cfg, "short") == 15  # soft limit 30 s
    assert budget_for(cfg, "long") == 100
    assert budget_for(cfg, None) == 100


def test_scheduler_waits_at_most_two_seconds_and_starts_short_again_after_a_success() -> None:
    backoff = Backoff()
    waits = [backoff.next() for _ in range(10)]
    assert waits[0] < 1 and max(waits) == MAX_BACKOFF <= 2.0
    backoff.reset()
    assert backoff.next() == waits[0]
