"""The pull-forward floor, the schedule check at publish, and job control's argument parsing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from config.errors import InvalidArgument, InvalidMessage
from config.settings import load_settings
from routing.recurrence import Recurrence, check_call, recurrence_of
from scheduler.jobs import parse_duration, parse_time
from scheduler.pullforward import pull_floor
from scheduler.store.control import decode_cursor, encode_cursor
from scheduler.wire import Dispatch, dispatch_header, dispatch_of, micros

T0 = datetime(2030, 1, 1, tzinfo=UTC)
CFG = load_settings({})


def s(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_the_floor_is_half_the_delay_asked_for() -> None:
    assert pull_floor(T0, s(3600), CFG) == s(1800)
    assert pull_floor(T0, s(3600), CFG, not_before=True) == s(3600)
    assert pull_floor(T0, s(1), CFG) == s(1)  # the 1 s minimum, capped at the due time
    assert pull_floor(T0, s(0), CFG) == s(0)


def run_idle(every: float, horizon: float) -> list[float]:
    """When one recurring job runs on an idle system: as soon as its floor passes."""
    runs, floor, due = [0.0], None, 0.0
    while True:
        now = runs[-1]
        ran_due = s(due)
        due = now + every
        floor = pull_floor(s(now), s(due), CFG, ran_due=ran_due)
        nxt = (floor - T0).total_seconds()
        if nxt > horizon:
            return runs
        runs.append(nxt)


def test_one_recurring_job_on_an_idle_system_runs_about_once_per_interval() -> None:
    assert run_idle(60, 180) == [0, 30, 90, 120, 180]
    assert len(run_idle(600, 3 * 3600)) == 25  # every 10 min for 3 h: 19 natural, not 4,000
    runs = run_idle(20, 60)
    assert runs == [0, 10, 30, 40, 60]  # the same shape scaled: what the process test checks


def test_a_run_pulled_far_forward_never_runs_again_before_its_natural_due_time() -> None:
    # Due at +3600, run at 0 (a seeded backlog), asks for +3600 again.
    assert pull_floor(T0, s(3600), CFG, ran_due=s(3600)) == s(3600)
    # Asks for a shorter delay than its natural due: its own due time wins.
    assert pull_floor(T0, s(60), CFG, ran_due=s(3600)) == s(60)
    # A run due in year 9999 (written by hand) pulled forward: its floor is the due time
    # asked for, not an OverflowError that fails the run.
    last = datetime(9999, 12, 31, 23, 59, tzinfo=UTC)
    assert pull_floor(T0, s(3600), CFG, ran_due=last) == s(3600)


def test_the_fraction_and_minimum_are_settings() -> None:
    strict = load_settings({"RECUR_PULL_FORWARD_FRACTION": "1"})
    assert pull_floor(T0, s(600), strict) == s(600)
    slow = load_settings({"RECUR_PULL_FORWARD_MIN_SECONDS": "300"})
    assert pull_floor(T0, s(100), slow) == s(100) and pull_floor(T0, s(700), slow) == s(350)
    with pytest.raises(Exception, match="between 0 and 1"):
        load_settings({"RECUR_PULL_FORWARD_FRACTION": "1.5"})


def test_the_dispatch_header_carries_the_due_time_and_reads_old_ones() -> None:
    lease = s(1800)
    header = dispatch_header("k", 3, lease, s(60))
    got = dispatch_of(type("Req", (), {"recur_dispatch": header})())
    assert got == Dispatch("k", 3, micros(lease), micros(s(60))) and got.ran_due == s(60)
    old = dispatch_of(type("Req", (), {"recur_dispatch": ["k", 3, micros(lease)]})())
    assert old is not None and old.ran_due is None


@pytest.mark.parametrize(("payload", "field"), [
    ({"every": "x"}, "payload.every"), ({"every": float("inf")}, "payload.every"),
    ({"every": 60, "runs": 0}, "payload.runs"), ({"every": 60, "runs": True}, "payload.runs"),
    ({"runs": 2}, "payload.every")])
def test_a_malformed_schedule_names_its_field(payload: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidMessage) as err:
        check_call([{"id": "m", "payload": payload}], {})
    assert err.value.field == field
    with pytest.raises(InvalidMessage):
        check_call([], {"message": {"payload": payload}})


def test_a_well_formed_schedule_or_none() -> None:
    assert recurrence_of({"every": 60, "runs": 2}) == Recurrence(60.0, 2)
    assert recurrence_of({"n": 1}) is None and recurrence_of("every") is None
    check_call(["not a message"], None)  # left to the message validator


@pytest.mark.parametrize(("text", "seconds"), [
    ("90", 90), ("90s", 90), ("10m", 600), ("1h30m", 5400), ("2d", 172800), ("1w", 604800),
    ("1.5h", 5400)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "ten", "10x", "-5m", "0", "10m5", "m10", "99999d"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(InvalidArgument):
        parse_duration(text)


def test_times_need_their_offset() -> None:
    assert parse_time("2030-01-01T01:00:00+01:00") == T0
    assert parse_time("2030-01-01T00:00:00Z") == T0
    for bad in ("2030-01-01T00:00:00", "tomorrow", "9999-12-31T23:59:59-14:00",
                "0001-01-01T00:00:00+14:00"):
        with pytest.raises(InvalidArgument):
            parse_time(bad)


def test_cursors_round_trip_and_refuse_garbage() -> None:
    assert decode_cursor(encode_cursor([T0, "k/1 2"])) == [T0.isoformat(), "k/1 2"]
    for bad in ("", "abc", encode_cursor([]).rstrip("=")):
        with pytest.raises(ValueError):
            decode_cursor(bad)
