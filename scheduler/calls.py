"""The producer half of the handshake: countdown/eta → a planned row.

``MessageTask.apply_async`` asks :func:`store_plan` whether a call goes to the
due-jobs store (a long enough delay, an explicit job key, or a task
rescheduling its own job) or straight to the broker. Input is checked first,
so a bad call raises before anything is written. The write itself, and
everything a run does with its row, is the worker's half (tasks/settle.py);
what travels between them is in scheduler/wire.py.
"""

from __future__ import annotations

import math
from abc import ABCMeta
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from config.buckets_in_use import bucket_table
from config.errors import InvalidSchedule
from config.settings import Settings
from config.text import brief
from routing import tracing
from routing.messages import validate_encoded
from scheduler.bounds import Limits, check_call, check_job_key, check_retries
from scheduler.call_options import NOT_STORED as NOT_STORED
from scheduler.call_options import StoredRun, check_stored_options, kept_by_any_run
from scheduler.pullforward import pull_floor
from scheduler.store import Job
from scheduler.wire import Dispatch, dispatch_of, encode_call, message_of, with_trace


@dataclass(frozen=True)
class ScheduledJob(metaclass=ABCMeta):
    """A call written to the store. ``apply_async`` hands it back as a Celery
    ``AsyncResult`` (tasks/stored_result.py's ``StoredResult``, registered as a
    ScheduledJob, so ``isinstance(result, ScheduledJob)`` still holds)."""

    job_key: str
    due_at: datetime
    #: False when a stale copy tried to reschedule its job (nothing was changed).
    accepted: bool = True

    @property
    def id(self) -> str:
        return self.job_key


def utcnow() -> datetime:
    return datetime.now(UTC)


def due_time(countdown: Any, eta: Any, now: datetime) -> datetime | None:
    """When a call is due, from Celery's ``countdown``/``eta`` (None: no delay given)."""
    if countdown is not None and eta is not None:
        raise InvalidSchedule("give countdown or eta, not both")
    if countdown is not None:
        return _after_countdown(countdown, now)
    return None if eta is None else _eta_utc(eta)


def _after_countdown(countdown: Any, now: datetime) -> datetime:
    if isinstance(countdown, bool) or not isinstance(countdown, int | float):
        raise InvalidSchedule(f"countdown must be a number of seconds, got {brief(countdown)}")
    if (isinstance(countdown, float) and not math.isfinite(countdown)) or countdown < 0:
        raise InvalidSchedule(f"countdown must be a finite number >= 0, got {brief(countdown)}")
    try:
        return now + timedelta(seconds=countdown)
    except OverflowError:
        raise InvalidSchedule(f"countdown {brief(countdown)} is past the last time a store "
                              "can hold (year 9999)") from None


def _eta_utc(eta: Any) -> datetime:
    if isinstance(eta, str):
        try:
            eta = datetime.fromisoformat(eta)
        except ValueError as exc:
            raise InvalidSchedule(f"eta {brief(eta)} is not an ISO 8601 time") from exc
    if not isinstance(eta, datetime):
        raise InvalidSchedule(f"eta must be a datetime, got {type(eta).__name__}")
    if eta.tzinfo is None or eta.utcoffset() is None:
        raise InvalidSchedule(f"eta {eta.isoformat()} is naive: give a timezone-aware time "
                              "(e.g. datetime.now(UTC) + delay)")
    try:
        return eta.astimezone(UTC)
    except OverflowError:
        raise InvalidSchedule(f"eta {eta.isoformat()} is out of range in UTC") from None


def check_message_options(options: Mapping[str, Any]) -> None:
    """Refuse Celery message options the broker or a worker cannot take: a NaN in a header
    closes the producer's connection (INTERNAL_ERROR), a priority over 255 fails to encode,
    and a negative or inverted time limit would be taken and fail every run."""
    for name in ("time_limit", "soft_time_limit", "expires"):
        value = options.get(name)
        if value is None or (name == "expires" and isinstance(value, datetime)):
            continue
        if name == "expires" and isinstance(value, str):
            try:
                datetime.fromisoformat(value)
                continue
            except ValueError:
                raise InvalidSchedule(f"expires {brief(value)} is not an ISO 8601 time") from None
        if isinstance(value, bool) or not isinstance(value, int | float) or (isinstance(
                value, float) and not math.isfinite(value)) or (value < 0 and name != "expires"):
            raise InvalidSchedule(f"{name} must be a finite number of seconds"
                                  f"{'' if name == 'expires' else ' >= 0'}, got {brief(value)}")
    soft, hard = options.get("soft_time_limit"), options.get("time_limit")
    if soft and hard and soft > hard:
        raise InvalidSchedule(f"soft_time_limit {brief(soft)} is above time_limit {brief(hard)}")
    priority = options.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)
                                 or not 0 <= priority <= 255):
        raise InvalidSchedule(f"priority must be a whole number 0..255, got {brief(priority)}")
    headers = options.get("headers")
    if headers is not None and not isinstance(headers, Mapping):
        raise InvalidSchedule(f"headers must be a mapping, got {type(headers).__name__}")


@dataclass(frozen=True)
class StorePlan:
    """A call that goes to the store: validated and encoded, not yet written."""

    task: str
    job: Job
    #: The running job's dispatch when the call reschedules its own row.
    reschedule_of: Dispatch | None


class PlanContext(NamedTuple):
    """What every call planned at one moment by one caller shares: the time, the running
    job's dispatch (a reschedule's), the row's bounds. ``apply_many`` takes it once for
    all its calls (a tenth of a call's cost)."""

    now: datetime
    running: Dispatch | None
    limits: Limits

    @classmethod
    def of(cls, request: Any, cfg: Settings) -> PlanContext:
        return cls(utcnow(), dispatch_of(request), Limits.of(cfg))


class CheckedOptions(NamedTuple):
    """A call's options checked, and what they decide whatever its message: ``apply_many``
    checks the options its calls share once, not once per call."""

    due: datetime | None
    #: Whether every option is kept by any stored run (none is checked per call).
    kept: bool

    @classmethod
    def of(cls, options: Mapping[str, Any], now: datetime) -> CheckedOptions:
        check_message_options(options)
        return cls(due_time(options.get("countdown"), options.get("eta"), now),
                   kept_by_any_run(options))


def resent_job_key(running: Dispatch | None, request: Any, task_name: str,
                   message: Mapping[str, Any]) -> str | None:
    """The running job's key when this call sends the running message again.

    A job stored under an explicit key (``job_key="report-42"``, a periodic
    entry's per-period key) that reschedules itself without repeating the key
    must move its own row, not start a second job under the message id.
    """
    if running is None or getattr(request, "task", None) != task_name:
        return None
    args = getattr(request, "args", None) or ()
    first = args[0] if args else (getattr(request, "kwargs", None) or {}).get("message")
    if isinstance(first, Mapping) and first.get("id") == message["id"]:
        return running.job_key
    return None


def is_retry(options: Mapping[str, Any], request: Any) -> bool:
    """Whether this call is a task's ``retry()``: Celery fills ``retries`` (and the rest of
    its options) from the running request. A producer's own ``retries=`` outside a run
    is a producer's call, its options checked like any other."""
    return (options.get("retries") is not None and request is not None
            and not getattr(request, "called_directly", True))


def _named_key(task_id: Any, job_key: str | None, key: str, limits: Limits) -> str:
    """The stored job's key: a producer's ``task_id`` names it (as ``job_key`` may: not
    both, unless they agree), else ``key``."""
    if task_id is None:
        return key
    if job_key is not None and task_id != job_key:
        raise InvalidSchedule(f"task_id {task_id!r:.60} and job_key {job_key!r:.60} "
                              "both name the stored job: give one")
    return check_job_key(task_id, limits, "task_id (the job key)")


def store_plan(task_name: str, args: Sequence[Any] | None, kwargs: Mapping[str, Any] | None,
               options: Mapping[str, Any], job_key: str | None, request: Any,
               cfg: Settings, *, not_before: bool = False,
               ignores_result: bool | None = None,
               context: PlanContext | None = None,
               checked: CheckedOptions | None = None) -> StorePlan | None:
    """The store write for this call, or None when it should be published directly.

    Validates the delay options on every call and, for store calls, the message
    (bucket, payload limit), that the arguments are JSON, and the row's bounds
    (scheduler/bounds.py: job key, encoded call), so nothing the store or the
    broker would refuse is written. A reschedule by the
    running job gets its pull-forward floor; ``not_before`` makes the due time
    the floor. A producer's ``task_id`` names the stored job (its job key, so the
    AsyncResult a canvas froze finds it); its other options are checked by
    scheduler/call_options.py (``ignores_result``: the task's own setting). ``context``:
    what calls planned together share (PlanContext), taken now when not given;
    ``checked``: these options' CheckedOptions at its time, checked now when not given.
    """
    if not isinstance(not_before, bool):
        raise InvalidSchedule(f"not_before must be True or False, got {brief(not_before)}")
    now, running, limits = context or PlanContext.of(request, cfg)
    due, kept = checked or CheckedOptions.of(options, now)
    call_args, call_kwargs = list(args or ()), dict(kwargs or {})
    if job_key is not None:  # bounds first: a bad key is refused before anything else
        check_job_key(job_key, limits)
    message, payload_text = validate_encoded(message_of(call_args, call_kwargs), cfg)
    key = job_key or resent_job_key(running, request, task_name, message) or message["id"]
    own = running if running is not None and running.job_key == key else None
    # A threshold of 0 sends every delayed call to the store, a due time already past too.
    long_delay = due is not None and (cfg.schedule_threshold <= 0
                                      or (due - now).total_seconds() >= cfg.schedule_threshold)
    if own is None and job_key is None and not long_delay:
        return None
    for name in ("link", "link_error"):
        if options.get(name) and own is None:
            raise InvalidSchedule(f"{name} is not supported for calls that go to the due-jobs "
                                  f"store (delay >= {cfg.schedule_threshold}s or a job key)")
    if own is None and not is_retry(options, request):  # a producer's call
        key = _named_key(options.get("task_id"), job_key, key, limits)
        if not kept:
            check_stored_options(options, StoredRun(
                task_name, bucket_table().get(message["bucket"]).queue, key, ignores_result),
                cfg.schedule_threshold)
    if job_key is None and own is None:
        check_job_key(key, limits, "job_key (the message id)")
    text = encode_call(call_args, call_kwargs, check_retries(options.get("retries")),
                       job_key=key, bucket=message["bucket"], payload_text=payload_text)
    check_call(text, call_args, call_kwargs, limits)
    text = with_trace(text, tracing.traceparent(), limits.call_bytes)  # the next run links it
    due = due or now
    # A run's reschedule gets its floor; a producer's call is a first run: none
    # (it may be pulled forward at once), unless it asks for not_before.
    floor = None if own is None and not not_before else pull_floor(
        now, due, cfg, ran_due=None if own is None else own.ran_due, not_before=not_before)
    job = Job(job_key=key, task=task_name, bucket=message["bucket"], args=text,
              due_at=due, early_at=floor)
    return StorePlan(task_name, job, own)
