"""``@user_lock``: one job per user at a time, in the order they were published.

Stack it under ``@app.task(bind=True, ...)``::

    @app.task(bind=True, base=MessageTask, name="tasks.sync_user")
    @user_lock(key=lambda message: message["user_id"])
    def sync_user(self, message): ...

A delivery either takes its user's lock and runs, or *parks* its job in Redis
and ends (the Celery event ``task-parked``), or is refused: a copy of a job that
already ran is dropped; a job passed over or past its wait budget is
dead-lettered. When a holder finishes, the release hands the lock to the user's
next parked job in the same Redis call and this process runs it at once (the
*chain*), for up to RECUR_LOCK_CHAIN_SECONDS (at most half the bucket's soft
time limit: chained jobs run inside the first job's time limits); after that,
or after a failure, the next job is published and takes the free lock when it
arrives. The holder's fencing token is ``self.request.user_lock.fence``.
"""

from __future__ import annotations

import functools
import logging
import math
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

from celery.exceptions import Ignore

from config.errors import (
    InvalidControlHeader,
    InvalidMessage,
    LockPassedOver,
    LockUnavailable,
    LockWaitExceeded,
)
from config.text import is_unicode
from routing import tracing
from scheduler.wire import DISPATCH_HEADER, request_header
from tasks import aio
from tasks.distlock import job as jobs
from tasks.distlock.broken import LockRefused
from tasks.distlock.chain import INLINE, chain_seconds, run_inline
from tasks.distlock.held import Held, check_budget
from tasks.distlock.job import LockGrant, ParkedJob, Ticket
from tasks.distlock.runtime import Runtime, publish_handover, runtime
from tasks.distlock.store import (
    ACQUIRED,
    DUPLICATE,
    NOT_NUMBERED,
    PARK_FULL,
    PARKED,
    PASSED_OVER,
    new_token,
)
from tasks.settle import run_state

F = TypeVar("F", bound=Callable[..., Any])
log = logging.getLogger("recur.distlock")

#: Seconds before a job whose lock Redis could not answer for is tried again
#: (times a jitter of 0.5-1.5): at least 1 s, the resolution of RabbitMQ's native
#: delayed delivery, and short, so it stays a broker countdown.
REDIS_DOWN_BACKOFF = 2.0
#: Longest lease a task may ask for (RECUR_LOCK_TTL's own bound: a day).
MAX_TTL = 86400
#: Shortest (RECUR_LOCK_TTL's too): the watchdog refreshes a lease every sixth of it, and
#: one of a millisecond lapses between two refreshes while its job still runs.
MIN_TTL = 1
#: Longest lock key: every one of a user's Redis keys carries it, and a message's
#: user_id is at most 200 characters (routing/messages.py).
MAX_KEY_CHARS = 1024


def message_user(message: Any) -> str:
    """The default key: the message's user (as it is: a missing or non-string one is
    refused by name, never locked as ``'None'`` with every other such user)."""
    if not isinstance(message, Mapping) or "user_id" not in message:
        raise InvalidMessage("user_id", "missing: the lock key is the message's user_id")
    return message["user_id"]  # type: ignore[no-any-return]


@dataclass(frozen=True)
class LockSpec:
    """How a task is locked: the key function and its overrides of the settings."""

    key: Callable[[Any], str]
    ttl: float | None
    when_redis_down: str | None

    def user_of(self, args: Any, kwargs: Any) -> str:
        """The lock key of a call: ``key`` applied to its first argument."""
        first = args[0] if args else (kwargs or {}).get("message")
        try:
            user = self.key(first)
        except InvalidMessage:
            raise
        except Exception as exc:  # the key function's own error: this call has no key
            raise InvalidMessage("user_id", f"the lock key function failed: "
                                 f"{type(exc).__name__}: {exc}") from None
        if not isinstance(user, str) or not user:
            raise InvalidMessage("user_id", f"the lock key must be a non-empty string, "
                                 f"got {user!r:.60}")
        if not is_unicode(user):
            raise InvalidMessage("user_id", "the lock key is not valid Unicode "
                                 "(a lone surrogate): no Redis key can name it")
        if len(user) > MAX_KEY_CHARS:
            raise InvalidMessage("user_id", f"the lock key is {len(user)} characters, "
                                 f"at most {MAX_KEY_CHARS}")
        return user


def user_lock(key: Callable[[Any], str] = message_user, *, ttl: float | None = None,
              when_redis_down: str | None = None) -> Callable[[F], F]:
    """Run the task under its user's lock, in its user's order (see the module doc).

    ``ttl`` overrides RECUR_LOCK_TTL and ``when_redis_down`` ('retry' or
    'run-unlocked') overrides RECUR_LOCK_WHEN_REDIS_DOWN for this task.
    """
    if when_redis_down not in (None, "retry", "run-unlocked"):
        raise ValueError(f"when_redis_down must be 'retry' or 'run-unlocked', "
                         f"got {when_redis_down!r}")
    if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int | float)
                            or not math.isfinite(ttl) or not MIN_TTL <= ttl <= MAX_TTL):
        raise ValueError(f"ttl must be a number of seconds from {MIN_TTL} to {MAX_TTL} "
                         f"(as RECUR_LOCK_TTL), got {ttl!r:.60}")
    spec = LockSpec(key, ttl, when_redis_down)

    def decorate(fn: F) -> F:
        fn = aio.blocking(fn)  # type: ignore[assignment]  # async def: held for its whole run

        @functools.wraps(fn)
        def run_locked(task: Any, *args: Any, **kwargs: Any) -> Any:
            if getattr(task.request, INLINE, False):  # run_inline holds the lock for it
                return fn(task, *args, **kwargs)
            return LockedCall(spec, task, fn, args, kwargs).run()

        run_locked.__user_lock__ = spec  # type: ignore[attr-defined]
        return run_locked  # type: ignore[return-value]

    return decorate


class LockedCall:
    """One delivery of a locked task: acquire, park or refuse; run; release; chain."""

    def __init__(self, spec: LockSpec, task: Any, fn: Callable[..., Any], args: Any,
                 kwargs: Any) -> None:
        self.spec, self.task, self.fn, self.args, self.kwargs = spec, task, fn, args, kwargs
        self.rt: Runtime = runtime()
        self.user = spec.user_of(args, kwargs)
        self.ticket = Ticket.from_request(task.request, self.rt.cfg.signing_key, task.name)
        self.ttl = spec.ttl or self.rt.cfg.lock_ttl
        self.job = ParkedJob(task=task.name, id=str(task.request.id), args=list(args),
                             kwargs=dict(kwargs), since=self.ticket.since or time.time(),
                             headers=jobs.other_headers(task.request))
        self.number_key = jobs.number_key(self.job.id,
                                          request_header(task.request, DISPATCH_HEADER))

    def run(self) -> Any:
        began, token, cfg = time.monotonic(), new_token(), self.rt.cfg
        try:
            attempt = self.rt.store.acquire(
                self.user, token, self.ttl, self.ticket.seq, self.number_key, self.job.to_json(),
                cfg.lock_gap_timeout, self.ticket.since, cfg.lock_wait_budget)
        except LockUnavailable as exc:
            return self.redis_down(exc)
        tracing.record("recur.lock.wait", self.ticket.since or None, key=self.user,
                       seq=attempt.seq, status=attempt.status, acquired=attempt.status == ACQUIRED)
        if attempt.status != ACQUIRED:
            return self.not_run(attempt.status, attempt.seq)
        grant = LockGrant(self.user, token, attempt.seq, attempt.fence)
        self.task.request.user_lock = grant
        held = Held(self.rt, grant, self.ttl, self.number_key, self.ticket.waited())
        chain_until = began + chain_seconds(cfg, self.task.request)
        try:
            return held.run(lambda: self.fn(self.task, *self.args, **self.kwargs))
        finally:
            handover = held.release(chain=time.monotonic() < chain_until)
            while handover is not None and handover.token:
                handover = run_inline(self.rt, self.user, handover, self.task.request,
                                      self.ttl, chain=time.monotonic() < chain_until)
            if handover is not None:
                publish_handover(self.user, handover)

    def not_run(self, status: int, seq: int) -> str:
        """A parked or duplicate delivery ends here; its run state tells a scheduler
        dispatch (tasks/settle.py) that the run doing the work settles its row.
        It returns (no Celery Ignore: its traceback formatting made a park cost more
        than a short job) and the worker reports ``task-parked``/``task-dropped``.
        A number never given out is refused (dead-lettered, later jobs untouched); a
        job that finds its user's parked jobs at the cap waits in the broker."""
        if status == NOT_NUMBERED:
            raise InvalidControlHeader(jobs.SEQ, f"job {self.job.id} of user {self.user} "
                                       f"carries #{seq}, a number never given out (above "
                                       f"the lock counter: forged, or the lock's Redis lost "
                                       f"its recent writes)")
        if status == PARK_FULL:
            self.wait_in_broker(seq)
        run_state(self.task.request).settled = True
        if status == PARKED:
            return jobs.parked(self.task.name, self.job.id, self.user, seq)
        if status == DUPLICATE:
            jobs.refused(self.task.name, self.job.id, self.user, seq, "duplicate")
            return f"{jobs.DROPPED_RESULT} user={self.user} #{seq}"
        run_state(self.task.request).settled = False
        if status == PASSED_OVER:
            raise LockPassedOver(f"job {self.job.id} of user {self.user} (#{seq}) arrived "
                                 f"after a later job of its user started; not run")
        raise LockWaitExceeded(f"job {self.job.id} of user {self.user} (#{seq}) is older "
                               f"than RECUR_LOCK_WAIT_BUDGET={self.rt.cfg.lock_wait_budget:g}s "
                               f"and its user's line is gone; not run")

    def redis_down(self, exc: LockUnavailable) -> Any:
        """Fail closed (re-enqueue the job) unless this task opted out."""
        mode = self.spec.when_redis_down or self.rt.cfg.lock_when_redis_down
        if mode == "run-unlocked":
            jobs.unlocked(self.task.name, self.job.id, self.user, exc)
            self.task.request.user_lock = None
            return self.fn(self.task, *self.args, **self.kwargs)
        check_budget(self.rt.cfg, self.job.id, self.user, self.ticket.waited())
        delay = REDIS_DOWN_BACKOFF * random.uniform(0.5, 1.5)
        # Redis answered and refused (a key another program wrote): an operator must act.
        jobs.redis_down(self.task.name, self.job.id, self.user, delay, exc,
                        logging.ERROR if isinstance(exc, LockRefused) else logging.WARNING)
        self.publish_again(delay, {jobs.SINCE: self.job.since})

    def wait_in_broker(self, seq: int) -> NoReturn:
        """Its user has RECUR_LOCK_MAX_PARKED jobs parked: this one is not parked but
        published again after a backoff, with its number and submission time, so it
        keeps its place in line (later jobs wait for it); past the wait budget it is
        dead-lettered. Nothing is dropped, and Redis holds at most the cap."""
        check_budget(self.rt.cfg, self.job.id, self.user, self.ticket.waited())
        delay = REDIS_DOWN_BACKOFF * random.uniform(0.5, 1.5)
        jobs.park_full(self.task.name, self.job.id, self.user, seq, delay)
        self.publish_again(delay, {jobs.SEQ: seq, jobs.SINCE: self.job.since})

    def publish_again(self, delay: float, ticket: dict[str, Any]) -> NoReturn:
        """Publish this job again in ``delay`` seconds (same id and headers, with
        ``ticket``) and end this delivery (acknowledged: the copy carries the job)."""
        headers = {**(self.task.request.headers or {}), **ticket}
        self.task.signature_from_request(self.task.request, countdown=delay,
                                         headers=headers).apply_async()
        raise Ignore()
