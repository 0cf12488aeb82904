"""Periodic entries, like celery beat's ``beat_schedule`` (interval and crontab).

Entries are declared in the Celery app's ``beat_schedule`` as beat users know
it; the scheduler stores them in ``periodic_entries`` and, each pass, turns
every entry whose time came into one due job whose key names the period
(``periodic:<name>:<time>``). With several schedulers the entry row is locked
(``SKIP LOCKED``) and the job key is per period, so each period fires once.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from config.errors import InvalidMessage, InvalidSchedule
from config.settings import Settings
from routing.messages import validate_message
from routing.recurrence import MAX_EVERY
from scheduler.bounds import Limits, check_call, check_job_key
from scheduler.call_options import READ, StoredRun, check_stored_options
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


#: What a ``beat_schedule`` entry may hold: celery beat's keys that mean something here.
ENTRY_KEYS = frozenset({"task", "schedule", "args", "kwargs", "options", "relative"})
#: Call options the store path reads for a producer's call (call_options.READ); a
#: periodic run keeps none (it runs at its schedule's times, under its period's key,
#: without callbacks).
NOT_PERIODIC = sorted(READ)
#: Room the job key ``periodic:<name>:<time>`` leaves for the time (an isoformat).
KEY_TIME = "0" * 32


def schedule_spec(schedule: Any, min_every: float = 0.1) -> str:
    """Our text form of a beat schedule: seconds, a timedelta, a plain celery
    ``schedule`` or a ``crontab``; anything else (solar, a custom class) is refused.

    An interval is finite, at least ``min_every`` (RECUR_MIN_EVERY) and at most
    ten years, as a recurring message's ``every`` is: nan or 0 would fire each pass.
    """
    from celery.schedules import crontab  # here: `recur status` imports this, not Celery
    from celery.schedules import schedule as interval

    if type(schedule) is interval and not schedule.relative:
        schedule = schedule.run_every
    if isinstance(schedule, timedelta):
        schedule = schedule.total_seconds()
    if isinstance(schedule, int | float) and not isinstance(schedule, bool):
        if not min_every <= schedule <= MAX_EVERY:  # nan fails both
            raise InvalidSchedule(f"periodic interval must be from {min_every:g} s "
                                  f"(RECUR_MIN_EVERY) to {MAX_EVERY:.0f} s, got {schedule!r:.40}")
        return f"{EVERY} {float(schedule)}"
    if type(schedule) is crontab:
        fields = (schedule._orig_minute, schedule._orig_hour, schedule._orig_day_of_month,
                  schedule._orig_month_of_year, schedule._orig_day_of_week)
        spec = f"{CRON} " + " ".join(_cron_field(f) for f in fields)
        next_run(spec, datetime.now(UTC))  # one that cannot be computed is refused now
        return spec
    kind = type(schedule)
    raise InvalidSchedule(f"unsupported periodic schedule {kind.__module__}.{kind.__qualname__}"
                          ": give seconds, a timedelta, a celery.schedules.schedule or a "
                          "crontab (solar, relative and custom schedules are not supported)")


def _cron_field(field: Any) -> str:
    """A crontab field as one cron word: a list or set of values joined by commas."""
    if isinstance(field, str):
        return "".join(field.split()) or "*"
    if isinstance(field, int):
        return str(field)
    return ",".join(str(value) for value in sorted(field))


def next_run(spec: str, after: datetime) -> datetime:
    """The first time ``spec`` fires strictly after ``after`` (UTC); a spec that is not
    one of ours (a row another writer left) raises :class:`InvalidSchedule`."""
    kind, _, rest = spec.partition(" ")
    try:
        if kind == EVERY:
            seconds = float(rest)
            if not 0 < seconds <= MAX_EVERY:  # nan, 0 or negative would fire each pass
                raise ValueError(f"an interval must be over 0 and at most {MAX_EVERY:.0f} s")
            return after + timedelta(seconds=seconds)
        if kind == CRON:
            from celery.schedules import crontab

            minute, hour, dom, month, dow = rest.split(" ")
            cron = crontab(minute=minute, hour=hour, day_of_month=dom, month_of_year=month,
                           day_of_week=dow)
            moment = after
            for _ in range(3):  # a fire time on ``after`` itself: look from the next minute
                start, delta, _ = cron.remaining_delta(moment, tz=UTC)
                fire: datetime = (start + delta).astimezone(UTC)
                if fire > after:
                    return fire
                moment += timedelta(minutes=1)
            raise ValueError("no fire time after now")
    except (ValueError, TypeError, ArithmeticError, LookupError) as exc:
        raise InvalidSchedule(f"periodic schedule {spec!r:.80}: {str(exc)[:120]}") from exc
    raise InvalidSchedule(f"unknown periodic schedule {spec!r:.80}")


def entries_from_beat(beat_schedule: Any, cfg: Settings,
                      registered: Collection[str] | None = None) -> list[PeriodicEntry]:
    """Entries from a Celery ``beat_schedule``; each names a message task and its message.

    A bad entry is refused at start (:class:`InvalidSchedule`, one line naming the entry
    and what is wrong) rather than stored and failing each period. ``registered``: the
    app's task names (None: not checked).
    """
    if not isinstance(beat_schedule, Mapping):
        raise InvalidSchedule("beat_schedule must be a mapping of entry names to entries, "
                              f"got {type(beat_schedule).__name__}")
    entries = []
    for name, entry in beat_schedule.items():
        try:
            entries.append(_entry(name, entry, cfg, registered))
        except (InvalidSchedule, InvalidMessage) as exc:
            raise InvalidSchedule(f"beat_schedule entry {name!r:.80}: {exc}") from None
    return entries


def _entry(name: Any, entry: Any, cfg: Settings,
           registered: Collection[str] | None) -> PeriodicEntry:
    limits = Limits.of(cfg)
    # Its jobs' keys are periodic:<name>:<time>: the name leaves room for the time.
    check_job_key(name, limits, "name")
    check_job_key(f"periodic:{name}:{KEY_TIME}", limits, "name in its job keys")
    if not isinstance(entry, Mapping):
        raise InvalidSchedule(f"must be a mapping (task, schedule, args...), "
                              f"got {type(entry).__name__}")
    unknown = sorted(map(str, set(entry) - ENTRY_KEYS))
    if unknown or entry.get("relative"):
        raise InvalidSchedule(f"{(unknown or ['relative'])[0]!r:.60} is not supported "
                              f"(keys: {', '.join(sorted(ENTRY_KEYS - {'relative'}))})")
    task = entry.get("task")
    if not isinstance(task, str) or not task.strip():
        raise InvalidSchedule(f"task must be a task name, got {task!r:.60}")
    if registered is not None and task not in registered:
        raise InvalidSchedule(f"task {task!r:.80} is not a registered task")
    if "schedule" not in entry:
        raise InvalidSchedule("schedule is missing")
    spec = schedule_spec(entry["schedule"], cfg.min_every)
    args, kwargs = entry.get("args") or (), entry.get("kwargs") or {}
    if not isinstance(args, list | tuple) or not isinstance(kwargs, Mapping):
        raise InvalidSchedule(f"args must be a list or tuple and kwargs a mapping, got "
                              f"{type(args).__name__} and {type(kwargs).__name__}")
    args, kwargs = list(args), dict(kwargs)
    message = validate_message(message_of(args, kwargs), cfg)
    text = encode_call(args, kwargs)
    check_call(text, args, kwargs, limits)
    _check_options(entry.get("options") or {}, task, cfg.buckets.get(message["bucket"]).queue,
                   f"periodic:{name}:{KEY_TIME}", cfg.schedule_threshold)
    return PeriodicEntry(name=name, task=task, bucket=message["bucket"], args=text,
                         schedule=spec)


def _check_options(options: Any, task: str, queue: str, key: str, threshold: float) -> None:
    """Refuse an option the periodic run would not keep (it is published as any stored run)."""
    if not isinstance(options, Mapping):
        raise InvalidSchedule(f"options must be a mapping, got {type(options).__name__}")
    for option in NOT_PERIODIC:
        if options.get(option) is not None:
            raise InvalidSchedule(f"options: {option} is not kept by a periodic entry "
                                  "(it runs at its schedule's times, under its period's key)")
    try:
        check_stored_options(options, StoredRun(task, queue, key, None), threshold)
    except InvalidSchedule as exc:
        raise InvalidSchedule(f"options: {exc}") from None
