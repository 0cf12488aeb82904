"""Periodic entries, like celery beat's ``beat_schedule`` (interval and crontab).

Entries are declared in the Celery app's ``beat_schedule`` as beat users know
it; the scheduler stores them in ``periodic_entries`` and, each pass, turns
every entry whose time came into one due job whose key names the period
(``periodic:<name>:<time>``). With several schedulers the entry row is locked
(``SKIP LOCKED``) and the job key is per period, so each period fires once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from config.errors import InvalidSchedule
from config.settings import Settings
from routing.messages import validate_message
from routing.recurrence import MAX_EVERY
from scheduler.bounds import Limits, check_job_key
from scheduler.wire import encode_call, message_of

EVERY, CRON = "every", "cron"


@dataclass(frozen=True)
class PeriodicEntry:
    """One entry: ``schedule`` is ``every <seconds>`` or ``cron <m> <h> <dom> <mon> <dow>``."""

    name: str
    task: str
    bucket: str
    args: str
    schedule: str


def schedule_spec(schedule: Any, min_every: float = 0.1) -> str:
    """Our text form of a beat schedule: seconds, a timedelta or a crontab.

    An interval is finite, at least ``min_every`` (RECUR_MIN_EVERY) and at most
    ten years, as a recurring message's ``every`` is: nan or 0 would fire each pass.
    """
    from celery.schedules import crontab  # here: `recur status` imports this, not Celery

    if isinstance(schedule, timedelta):
        schedule = schedule.total_seconds()
    if isinstance(schedule, int | float) and not isinstance(schedule, bool):
        if not min_every <= schedule <= MAX_EVERY:  # nan fails both
            raise InvalidSchedule(f"periodic interval must be from {min_every:g} s "
                                  f"(RECUR_MIN_EVERY) to {MAX_EVERY:.0f} s, got {schedule!r:.40}")
        return f"{EVERY} {float(schedule)}"
    if isinstance(schedule, crontab):
        fields = (schedule._orig_minute, schedule._orig_hour, schedule._orig_day_of_month,
                  schedule._orig_month_of_year, schedule._orig_day_of_week)
        return f"{CRON} " + " ".join(str(f) for f in fields)
    raise InvalidSchedule(f"unsupported periodic schedule {schedule!r}: give seconds, a "
                          "timedelta or a celery.schedules.crontab")


def next_run(spec: str, after: datetime) -> datetime:
    """The first time ``spec`` fires strictly after ``after`` (UTC)."""
    kind, _, rest = spec.partition(" ")
    if kind == EVERY:
        return after + timedelta(seconds=float(rest))
    if kind == CRON:
        from celery.schedules import crontab

        minute, hour, dom, month, dow = rest.split(" ")
        cron = crontab(minute=minute, hour=hour, day_of_month=dom, month_of_year=month,
                       day_of_week=dow, nowfun=lambda: after)
        start, delta, _ = cron.remaining_delta(after, tz=UTC)
        fire: datetime = (start + delta).astimezone(UTC)
        return fire if fire > after else next_run(spec, after + timedelta(minutes=1))
    raise InvalidSchedule(f"unknown periodic schedule {spec!r}")


def entries_from_beat(beat_schedule: Mapping[str, Mapping[str, Any]],
                      cfg: Settings) -> list[PeriodicEntry]:
    """Entries from a Celery ``beat_schedule``; each names a message task and its message."""
    entries = []
    for name, entry in beat_schedule.items():
        args, kwargs = list(entry.get("args") or ()), dict(entry.get("kwargs") or {})
        message = validate_message(message_of(args, kwargs), cfg)
        # Its jobs' keys are periodic:<name>:<time>: the name leaves room for the time.
        check_job_key(f"periodic:{name}:{'0' * 32}", Limits.of(cfg), "beat_schedule name")
        entries.append(PeriodicEntry(name=name, task=str(entry["task"]),
                                     bucket=message["bucket"], args=encode_call(args, kwargs),
                                     schedule=schedule_spec(entry["schedule"], cfg.min_every)))
    return entries
