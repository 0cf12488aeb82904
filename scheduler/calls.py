"""The task side of the store: countdown/eta → a row, and the dispatch token check.

``MessageTask.apply_async`` asks :func:`store_plan` whether a call goes to the
due-jobs store (a long enough delay, an explicit job key, or a task
rescheduling its own job) or straight to the broker. Input is checked first,
so a bad call raises before anything is written.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from celery.exceptions import Ignore, Reject, Retry

from config import signing
from config.buckets import bucket_table
from config.errors import InvalidControlHeader, InvalidSchedule, PermanentFailure, StoreError
from config.settings import Settings, settings
from routing.messages import validate_message
from scheduler.bounds import Limits, check_call, check_job_key, check_retries
from scheduler.callargs import encode_call, message_of
from scheduler.metrics import STALE_DROPPED
from scheduler.outages import budget_for, ride_out
from scheduler.pullforward import pull_floor
from scheduler.store import DueStore, Job, get_store

log = logging.getLogger(__name__)

#: The message header the scheduler sets, ``[job_key, token, lease, due]`` (the
#: lease expiry and the row's due time in microseconds since the epoch, see
#: store.Claimed); the worker compares the first three with the row, and counts
#: the job's pull-forward floor from the due time. One header: every header
#: costs publish time.
DISPATCH_HEADER = "recur_dispatch"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Dispatch:
    """Which row a running message is a copy of, and the token it was dispatched with."""

    job_key: str
    token: int
    lease_us: int | None = None
    #: The row's due time when it was dispatched (absent from older messages).
    due_us: int | None = None

    @property
    def ran_due(self) -> datetime | None:
        """The due time of this run (it ran early when this is still ahead)."""
        return None if self.due_us is None else EPOCH + timedelta(microseconds=self.due_us)

    def matches(self, live: tuple[int, datetime | None] | None) -> bool:
        """Whether this copy is the row's live dispatch (token and lease stamp: a copy
        without a lease stamp matches nothing, since the token alone can repeat)."""
        if live is None or live[0] != self.token or self.lease_us is None:
            return False
        return live[1] is None or micros(live[1]) == self.lease_us

    def header(self) -> list[Any]:
        """The header value of this dispatch (a copy handed back carries it again)."""
        return [self.job_key, self.token, self.lease_us, self.due_us]


def micros(moment: datetime) -> int:
    """Microseconds since the epoch: an exact, JSON-safe stamp of a datetime."""
    return (moment - EPOCH) // timedelta(microseconds=1)


@dataclass(frozen=True)
class ScheduledJob:
    """What ``apply_async`` returns for a call that went to the store."""

    job_key: str
    due_at: datetime
    #: False when a stale copy tried to reschedule its job (nothing was changed).
    accepted: bool = True

    @property
    def id(self) -> str:
        return self.job_key


def utcnow() -> datetime:
    return datetime.now(UTC)


def _header(request: Any, name: str) -> Any:
    """A message header as Celery exposes it: a request attribute, or in ``headers``."""
    value = getattr(request, name, None)
    headers = getattr(request, "headers", None)
    if value is None and isinstance(headers, Mapping):
        value = headers.get(name)
    return value


def dispatch_of(request: Any) -> Dispatch | None:
    """The dispatch a task request carries (the scheduler's header), or None.

    The header is input: a malformed one, one without its lease stamp, or (with
    RECUR_SIGNING_KEY) one not signed for this job is refused with
    InvalidControlHeader, and the worker dead-letters the message unrun."""
    value = _header(request, DISPATCH_HEADER)
    if value is not None:
        signing.verify(settings().signing_key, getattr(request, "id", None),
                       getattr(request, "task", None), DISPATCH_HEADER, value,
                       _header(request, signing.SIG_HEADER))
    return parse_dispatch(value)


def dispatch_in(headers: Mapping[str, Any]) -> Dispatch | None:
    """The dispatch a raw message's headers carry (a dead letter's, say), or None;
    a malformed, lease-less or badly signed header counts as none: such a copy is
    nobody's live dispatch."""
    try:
        signing.verify_headers(settings().signing_key, headers, DISPATCH_HEADER)
        return parse_dispatch(headers.get(DISPATCH_HEADER))
    except InvalidControlHeader:
        return None


def parse_dispatch(value: Any) -> Dispatch | None:
    """A ``recur_dispatch`` header value as a :class:`Dispatch` (None: no header);
    InvalidControlHeader unless it is ``[job key, token, lease, due]`` (due may be
    absent or null; the lease stamp may not)."""
    if value is None:
        return None
    if not isinstance(value, list | tuple) or len(value) not in (3, 4):
        raise InvalidControlHeader(DISPATCH_HEADER, f"must be [job key, token, lease, due], "
                                   f"got {value!r:.80}")
    key, token, lease, *rest = value
    if not isinstance(key, str) or not key:
        raise InvalidControlHeader(DISPATCH_HEADER, f"the job key must be a non-empty "
                                   f"string, got {key!r:.80}")
    if lease is None:
        raise InvalidControlHeader(DISPATCH_HEADER, "it carries no lease stamp, and a token "
                                   "alone can repeat: it would match any lease")
    due = rest[0] if rest else None
    return Dispatch(key, _stamp(token, "token"), _stamp(lease, "lease stamp"),
                    None if due is None else _stamp(due, "due time"))


def _stamp(value: Any, what: str) -> int:
    """A whole number of a dispatch header (InvalidControlHeader if not one)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidControlHeader(DISPATCH_HEADER, f"the {what} must be a whole number, "
                                   f"got {value!r:.40}")
    return value


def dispatch_header(job_key: str, token: int, lease_until: datetime,
                    due_at: datetime | None = None) -> list[Any]:
    """The header value :func:`dispatch_of` reads back."""
    head: list[Any] = [job_key, token, micros(lease_until)]
    return head if due_at is None else [*head, micros(due_at)]


def due_time(countdown: Any, eta: Any, now: datetime) -> datetime | None:
    """When a call is due, from Celery's ``countdown``/``eta`` (None: no delay given)."""
    if countdown is not None and eta is not None:
        raise InvalidSchedule("give countdown or eta, not both")
    if countdown is not None:
        return _after_countdown(countdown, now)
    return None if eta is None else _eta_utc(eta)


def _after_countdown(countdown: Any, now: datetime) -> datetime:
    if isinstance(countdown, bool) or not isinstance(countdown, int | float):
        raise InvalidSchedule(f"countdown must be a number of seconds, got {countdown!r}")
    if not math.isfinite(countdown) or countdown < 0:
        raise InvalidSchedule(f"countdown must be a finite number >= 0, got {countdown!r}")
    try:
        return now + timedelta(seconds=countdown)
    except OverflowError:
        raise InvalidSchedule(f"countdown {countdown!r} is past the last time a store "
                              "can hold (year 9999)") from None


def _eta_utc(eta: Any) -> datetime:
    if isinstance(eta, str):
        try:
            eta = datetime.fromisoformat(eta)
        except ValueError as exc:
            raise InvalidSchedule(f"eta {eta!r} is not an ISO 8601 time") from exc
    if not isinstance(eta, datetime):
        raise InvalidSchedule(f"eta must be a datetime, got {type(eta).__name__}")
    if eta.tzinfo is None or eta.utcoffset() is None:
        raise InvalidSchedule(f"eta {eta.isoformat()} is naive: give a timezone-aware time "
                              "(e.g. datetime.now(UTC) + delay)")
    try:
        return eta.astimezone(UTC)
    except OverflowError:
        raise InvalidSchedule(f"eta {eta.isoformat()} is out of range in UTC") from None


@dataclass(frozen=True)
class StoreCall:
    """A call that goes to the store: validated and encoded, not yet written."""

    task: str
    job: Job
    reschedule_of: Dispatch | None

    def write(self, cfg: Settings, request: Any) -> ScheduledJob:
        """Write the row: an upsert, or the token-checked reschedule of the running job.

        A store outage is ridden out (RECUR_OUTAGE_BUDGET). A reschedule that still
        fails is remembered on the request: the run then never finishes the job
        (even if the task caught the error), it retries the reschedule or hands the
        message back.
        """
        store, job = get_store(cfg.database_url), self.job
        if self.reschedule_of is None:
            store.schedule([job], utcnow())
            return ScheduledJob(job.job_key, job.due_at)
        request.recur_pending = self  # until it is written: no finish for this run
        accepted = ride_out(f"job {job.job_key}: reschedule", lambda: self.reschedule(store),
                            budget_left(request, cfg))
        request.recur_pending = None
        request.recur_settled = True  # this run decided its row's fate: no finish
        return ScheduledJob(job.job_key, job.due_at, accepted)

    def reschedule(self, store: DueStore) -> bool:
        """The token-checked reschedule; False (logged) when this copy is stale."""
        assert self.reschedule_of is not None
        job, token = self.job, self.reschedule_of.token
        accepted = store.reschedule(job.job_key, token, job.due_at, utcnow(), args=job.args,
                                    early_at=job.early_at)
        if not accepted:
            STALE_DROPPED.labels("reschedule").inc()
            log.warning("job %s: not rescheduled, token %d is stale (the job was dispatched "
                        "again, or cancelled); leaving it to its live copy, if any",
                        job.job_key, token)
        return accepted


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


def store_plan(task_name: str, args: Sequence[Any] | None, kwargs: Mapping[str, Any] | None,
               options: Mapping[str, Any], job_key: str | None, request: Any,
               cfg: Settings, *, not_before: bool = False) -> StoreCall | None:
    """The store write for this call, or None when it should be published directly.

    Validates the delay options on every call and, for store calls, the message
    (bucket, payload limit), that the arguments are JSON, and the row's bounds
    (scheduler/bounds.py: job key, encoded call), so nothing the store or the
    broker would refuse is written. A reschedule by the
    running job gets its pull-forward floor; ``not_before`` makes the due time
    the floor.
    """
    if not isinstance(not_before, bool):
        raise InvalidSchedule(f"not_before must be True or False, got {not_before!r}")
    now = utcnow()
    due = due_time(options.get("countdown"), options.get("eta"), now)
    call_args, call_kwargs = list(args or ()), dict(kwargs or {})
    running = dispatch_of(request)
    limits = Limits.of(cfg)
    if job_key is not None:  # bounds first: a bad key is refused before anything else
        check_job_key(job_key, limits)
    message = validate_message(message_of(call_args, call_kwargs), cfg)
    key = job_key or resent_job_key(running, request, task_name, message) or message["id"]
    own = running if running is not None and running.job_key == key else None
    long_delay = due is not None and (due - now).total_seconds() >= cfg.schedule_threshold
    if own is None and job_key is None and not long_delay:
        return None
    for name in ("link", "link_error"):
        if options.get(name) and own is None:
            raise InvalidSchedule(f"{name} is not supported for calls that go to the due-jobs "
                                  f"store (delay >= {cfg.schedule_threshold}s or a job key)")
    if job_key is None and own is None:
        check_job_key(key, limits, "job_key (the message id)")
    text = encode_call(call_args, call_kwargs, check_retries(options.get("retries")),
                       job_key=key, bucket=message["bucket"])
    check_call(text, call_args, call_kwargs, limits)
    due = due or now
    # A run's reschedule gets its floor; a producer's call is a first run: none
    # (it may be pulled forward at once), unless it asks for not_before.
    floor = None if own is None and not not_before else pull_floor(
        now, due, cfg, ran_due=None if own is None else own.ran_due, not_before=not_before)
    job = Job(job_key=key, task=task_name, bucket=message["bucket"], args=text,
              due_at=due, early_at=floor)
    return StoreCall(task_name, job, own)


def queue_of(request: Any) -> str | None:
    """The queue a task request was delivered from."""
    info = getattr(request, "delivery_info", None) or {}
    return info.get("routing_key") if isinstance(info, Mapping) else None


def budget_left(request: Any, cfg: Settings) -> float:
    """Seconds this run may still wait for the store: one budget per run, shared by its
    token check, reschedule and finish (they all happen inside the task's time)."""
    deadline = getattr(request, "recur_outage_deadline", None)
    if deadline is None:
        deadline = request.recur_outage_deadline = (time.monotonic()
                                                    + budget_for(cfg, queue_of(request)))
    return max(0.0, deadline - time.monotonic())


def run_dispatched(request: Any, dispatch: Dispatch, cfg: Settings, run: Any) -> Any:
    """Run a scheduler-dispatched message unless it is a stale copy; settle its row.

    A copy whose token is no longer the row's (its lease ran out and the job
    was dispatched again, or the job already finished) is dropped and logged.
    A run that neither rescheduled nor failed finishes its one-shot job; a run
    whose reschedule failed never does. Store outages are ridden out
    (:mod:`scheduler.outages`); :class:`StoreUnavailable` means the budget ran out.
    """
    request.recur_outage_deadline = None  # a new run: a whole budget
    request.recur_live_dispatch = dispatch

    def budget() -> float:
        return budget_left(request, cfg)

    key = dispatch.job_key
    store = ride_out(f"job {key}: open the store", lambda: get_store(cfg.database_url),
                     budget())
    live = ride_out(f"job {key}: token check", lambda: store.live_dispatch(key, wait=False),
                    budget())
    if not dispatch.matches(live):  # maybe its dispatch is still committing: wait for it
        live = ride_out(f"job {key}: token check", lambda: store.live_dispatch(key), budget())
    if not dispatch.matches(live):
        STALE_DROPPED.labels("run").inc()
        log.warning("dropping stale duplicate of job %s: it carries token %d (lease %s), the "
                    "job's live dispatch is %s", key, dispatch.token,
                    dispatch.lease_us, "none" if live is None else
                    f"token {live[0]} (lease {live[1] and micros(live[1])})")
        return None
    dispatch = request.recur_live_dispatch = last_chance(request, dispatch, store, cfg)
    try:
        result = run()
    except (*NOT_A_FAILED_RUN, PermanentFailure):  # running again soon would not help
        raise
    except Exception:
        retry_soon(dispatch, store, budget())
        raise
    settle(request, dispatch, store, budget())
    return result


#: Exceptions that are not the task's failure: the store's (the message is handed
#: back) and Celery's own control flow.
NOT_A_FAILED_RUN = (StoreError, Retry, Ignore, Reject)
#: Seconds after a failed run (its message dead-lettered as rejected) before its
#: row is dispatched again, instead of after the whole lease.
RETRY_FAILED_AFTER = 5.0
#: Seconds past the bucket's hard time limit that a last delivery's lease lasts.
LEASE_MARGIN = 15.0


def settle(request: Any, dispatch: Dispatch, store: DueStore, budget: float) -> None:
    """After a run: write a reschedule it still owes, or finish its one-shot job."""
    pending: StoreCall | None = getattr(request, "recur_pending", None)
    if pending is not None:  # the task caught its failed reschedule: never a finish
        log.warning("job %s: its reschedule failed during the run; trying it again",
                    dispatch.job_key)
        ride_out(f"job {dispatch.job_key}: reschedule", lambda: pending.reschedule(store),
                 budget)
        request.recur_pending = None
        return
    if getattr(request, "recur_settled", False):
        return
    if not ride_out(f"job {dispatch.job_key}: finish",
                    lambda: store.finish(dispatch.job_key, dispatch.token), budget):
        STALE_DROPPED.labels("finish").inc()
        log.warning("job %s: finished, but token %d is stale: the job was dispatched again "
                    "meanwhile", dispatch.job_key, dispatch.token)


def retry_soon(dispatch: Dispatch, store: DueStore, budget: float = 0.0) -> None:
    """A run failed (its message goes to the dead-letter queue as rejected): make its
    row due again in a few seconds rather than when the whole lease runs out. The
    row's attempts still count, so a job that keeps failing ends in ``.dead``. A store
    outage is ridden out within what is left of the run's budget: the dead-letter
    sweep (scheduler/dead_sweep.py) reads a rejected copy whose lease was never moved
    as a failure for good, left to its lease."""
    until = utcnow() + timedelta(seconds=RETRY_FAILED_AFTER)
    shorten_lease(dispatch, store, until, "failed run", budget)


def last_chance(request: Any, dispatch: Dispatch, store: DueStore, cfg: Settings
                ) -> Dispatch:
    """On the delivery the queue's limit allows last, shorten the row's lease to the
    bucket's hard time limit: if this delivery dies too, the broker dead-letters the
    copy and the row comes back after that, not after RECUR_LEASE_SECONDS.

    The lease always moves (by a millisecond at least, when it already ends sooner):
    a moved lease is how the dead-letter sweep tells a copy whose last delivery
    started a run and died (poison: the job is dead-lettered) from one that was
    returned by consumers that died or lost their connection before running it
    (dispatched again at once). Returns the dispatch as it now stands (the moved
    lease stamp): a message handed back from this delivery carries it, so its
    new copy is still the live one."""
    count = _header(request, "x-delivery-count")
    bucket = bucket_table().by_queue.get(queue_of(request) or "")
    if cfg.queue_type != "quorum" or bucket is None or int(count or 0) < cfg.max_deliveries - 1:
        return dispatch
    until = utcnow() + timedelta(seconds=bucket.time_limit + LEASE_MARGIN)
    if dispatch.lease_us is not None:
        until = min(until, EPOCH + timedelta(microseconds=dispatch.lease_us - MOVED_US))
    if not shorten_lease(dispatch, store, until, "last delivery"):
        return dispatch
    return Dispatch(dispatch.job_key, dispatch.token, micros(until), dispatch.due_us)


#: How far the last delivery moves a lease that already ends sooner than its own
#: would (microseconds): enough to show that the delivery started.
MOVED_US = 1000


def shorten_lease(dispatch: Dispatch, store: DueStore, until: datetime, why: str,
                  budget: float = 0.0) -> bool:
    """End the dispatch's lease at ``until`` if that is sooner than its lease stamp;
    whether it moved (best effort: if the store stays down past ``budget`` seconds
    the lease simply runs its course)."""
    if dispatch.lease_us is not None and dispatch.lease_us <= micros(until):
        return False
    try:
        return ride_out(f"job {dispatch.job_key}: move its lease ({why})",
                        lambda: store.set_lease(dispatch.job_key, dispatch.token, until),
                        budget)
    except StoreError as exc:
        log.warning("job %s: cannot shorten its lease (%s): %s; it is dispatched again "
                    "when the lease runs out", dispatch.job_key, why, exc)
        return False
