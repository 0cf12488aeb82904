"""Periodic entries: beat schedules to our text form and their next run times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from celery.schedules import crontab, schedule, solar

from config.errors import InvalidSchedule
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
    for garbage in ("sometimes 3", "every nan", "every 0", "every -5", "every 1e300",
                    "every x", "cron 0 0 31 2 *", "cron 0 0", "cron 99 * * * *"):
        with pytest.raises(InvalidSchedule):
            next_run(garbage, T)


def test_beat_schedule_entries_are_validated_messages() -> None:
    cfg = load_settings({})
    msg = {"id": "daily", "user_id": "u", "bucket": "long", "payload": None}
    (entry,) = entries_from_beat({"nightly": {"task": "tasks.process_message",
                                              "schedule": crontab(minute=0, hour=3),
                                              "args": (msg,)}}, cfg)
    assert (entry.name, entry.bucket, entry.schedule) == ("nightly", "long", "cron 0 3 * * *")
    with pytest.raises(InvalidSchedule, match="entry 'bad': invalid message: bucket"):
        entries_from_beat({"bad": {"task": "t", "schedule": 5,
                                   "args": ({**msg, "bucket": "huge"},)}}, cfg)


def test_a_beat_entry_name_too_long_for_its_job_keys_is_refused_by_name() -> None:
    message = {"id": "m", "user_id": "u", "bucket": "short", "payload": {}}
    with pytest.raises(InvalidSchedule, match="beat_schedule entry 'nnn"):
        entries_from_beat({"n" * 600: {"task": "tasks.process_message", "schedule": 5,
                                       "args": [message]}}, load_settings({}))


MSG = {"id": "m", "user_id": "u", "bucket": "short", "payload": {}}
TASKS = {"tasks.process_message"}


def beat(**changes: object) -> dict[str, object]:
    return {"task": "tasks.process_message", "schedule": 5, "args": [MSG], **changes}


class Custom(schedule):
    """A schedule class of the user's own: its times are not ours to compute."""


def test_every_hostile_beat_entry_is_refused_naming_the_entry() -> None:
    cfg = load_settings({})
    hostile: dict[object, object] = {
        "solar": beat(schedule=object.__new__(solar)), "custom": beat(schedule=Custom(30)),
        "relative": beat(schedule=schedule(30, relative=True)), "none": beat(schedule=None),
        "missing": {"task": "tasks.process_message", "args": [MSG]},
        "unregistered": beat(task="no.such.task"), "long-task": beat(task="t" * 10_000),
        "int-task": beat(task=5), "no-task": beat(task=None),
        "big": beat(kwargs={"x": "a" * 100_000}), "surrogate": beat(kwargs={"x": "\udc00"}),
        "nul": beat(args=[{**MSG, "payload": "a\x00"}]), "set": beat(kwargs={"x": {1}}),
        "str-args": beat(args="abc"), "list-kwargs": beat(kwargs=[1]),
        "queue": beat(options={"queue": "elsewhere"}), "countdown": beat(options={"countdown": 9}),
        "expires": beat(options={"expires": 9}), "priority": beat(options={"priority": 3}),
        "bad-options": beat(options=5), "unknown-key": beat(foo=1), "not-a-map": 5,
        "ctl\x01": beat(), "n" * 100_000: beat(), "sur\ud800": beat(), " ": beat(), 5: beat(),
    }
    for name, entry in hostile.items():
        with pytest.raises(InvalidSchedule) as refused:
            entries_from_beat({name: entry}, cfg, TASKS)
        assert str(refused.value).startswith(f"beat_schedule entry {name!r:.80}"), name
    for not_a_mapping in ([1], "x", None):
        with pytest.raises(InvalidSchedule):
            entries_from_beat(not_a_mapping, cfg, TASKS)


def test_plain_celery_schedules_and_list_crontab_fields_are_taken() -> None:
    cfg = load_settings({})
    got = entries_from_beat({"a": beat(schedule=schedule(timedelta(seconds=30))),
                             "b": beat(schedule=crontab(minute=[30, 0], hour={2, 1})),
                             "c": beat(options={"queue": "short", "retry": True})}, cfg, TASKS)
    assert [e.schedule for e in got] == ["every 30.0", "cron 0,30 1,2 * * *", "every 5.0"]
    assert next_run(got[1].schedule, T) == datetime(2030, 1, 2, 1, 0, tzinfo=UTC)
