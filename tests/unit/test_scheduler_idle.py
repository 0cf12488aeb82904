"""The idle scheduler's sleep (scheduler/idle.py): doubling up to the idle interval,
bounded by the next due time and by half the schedule threshold, reset when busy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from scheduler.idle import MIN_SLEEP, IdleWait

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def sleeps(idle: IdleWait, n: int, wake: datetime | None = None) -> list[float]:
    return [idle.next(lambda: NOW, lambda _now: wake) for _ in range(n)]


def test_the_sleep_doubles_up_to_the_idle_interval() -> None:
    idle = IdleWait(0.2, 2.0, 5.0)
    assert sleeps(idle, 7) == [0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0]


def test_busy_goes_back_to_the_short_interval() -> None:
    idle = IdleWait(0.2, 2.0, 5.0)
    sleeps(idle, 5)
    idle.busy()
    assert sleeps(idle, 2) == [0.2, 0.4]


def test_never_past_the_next_row_due() -> None:
    idle = IdleWait(0.2, 2.0, 5.0)
    sleeps(idle, 5)
    assert sleeps(idle, 1, NOW + timedelta(seconds=0.7)) == [0.7]
    assert sleeps(idle, 1, NOW + timedelta(microseconds=5)) == [MIN_SLEEP]


def test_the_idle_interval_stays_below_half_the_schedule_threshold() -> None:
    """A job written while it sleeps is due a threshold later: a pass sees it first."""
    idle = IdleWait(0.2, 30.0, 5.0)
    assert max(sleeps(idle, 10)) == 2.5
    assert IdleWait(0.5, 2.0, 0.4).cap == 0.5  # never below the short interval


def test_the_short_interval_reads_nothing() -> None:
    def no_read(_now: datetime) -> datetime | None:
        raise AssertionError("read the store for a short sleep")

    idle = IdleWait(0.2, 2.0, 5.0)
    assert idle.next(lambda: NOW, no_read) == 0.2
