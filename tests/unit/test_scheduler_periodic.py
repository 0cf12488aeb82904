"""Periodic entries: beat schedules to our text form and their next run times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from celery.schedules import crontab

from config.errors import InvalidMessage, InvalidSchedule
from config.settings import load_settings
from scheduler.periodic import entries_from_beat, next_run, schedule_spec

T = datetime(2030, 1, 1, 10, 2, 30, tzinfo=UTC)


def test_intervals_and_crontabs_become_specs() -> None:
    assert schedule_spec(30) == "every 30.0"
    assert schedule_spec(timedelta(minutes=2)) == "every 120.0"
    assert schedule_spec(crontab(minute="*/5")) == "cron */5 * * * *"
    assert schedule_spec(crontab(minute=0, hour=3)) == "cron 0 3 * * *"
    for bad in (0, -5, "hourly", True, float("nan"), float("inf"), 0.01, 10**12):
        with pytest.raises(InvalidSchedule):
            schedule_spec(bad)


def test_next_run_is_strictly_after() -> None:
    assert next_run("every 30.0", T) == T + timedelta(seconds=30)
    assert next_run("cron */5 * * * *", T) == datetime(2030, 1, 1, 10, 5, tzinfo=UTC)
    assert next_run("cron 0 3 * * *", T) == datetime(2030, 1, 2, 3, 0, tzinfo=UTC)
    on_the_minute = datetime(2030, 1, 1, 10, 5, tzinfo=UTC)
    assert next_run("cron */5 * * * *", on_the_minute) == on_the_minute + timedelta(minutes=5)
    with pytest.raises(InvalidSchedule):
        next_run("sometimes 3", T)


def test_beat_schedule_entries_are_validated_messages() -> None:
    cfg = load_settings({})
    msg = {"id": "daily", "user_id": "u", "bucket": "long", "payload": None}
    (entry,) = entries_from_beat({"nightly": {"task": "tasks.process_message",
                                              "schedule": crontab(minute=0, hour=3),
                                              "args": (msg,)}}, cfg)
    assert (entry.name, entry.bucket, entry.schedule) == ("nightly", "long", "cron 0 3 * * *")
    with pytest.raises(InvalidMessage, match="bucket"):
        entries_from_beat({"bad": {"task": "t", "schedule": 5,
                                   "args": ({**msg, "bucket": "huge"},)}}, cfg)


def test_a_beat_entry_name_too_long_for_its_job_keys_is_refused_by_name() -> None:
    message = {"id": "m", "user_id": "u", "bucket": "short", "payload": {}}
    with pytest.raises(InvalidSchedule, match="beat_schedule name"):
        entries_from_beat({"n" * 600: {"task": "tasks.process_message", "schedule": 5,
                                       "args": [message]}}, load_settings({}))
