"""``@user_lock``: one job per user at a time, in the order they were published.

Stack it under ``@app.task(bind=True, ...)``::

    @app.task(bind=True, base=MessageTask, name="tasks.sync_user")
    @user_lock(key=lambda message: message["user_id"])
    def sync_user(self, message): ...

A job whose user is busy (or whose earlier jobs have not started yet) does not
run and does not retry: it is parked in Redis and its delivery returns None
(acknowledged; to Celery a success that did nothing), and it runs when the job
before it releases the lock (see chain.py, store.py and tasks/lua). Parking is
neither a failure nor a retry. The holder's fencing token is
``self.request.user_lock.fence`` (or ``fencing_token(self)``).
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from celery.exceptions import Ignore

from config.errors import InvalidMessage, LockUnavailable
from tasks.distlock import events
from tasks.distlock.chain import INLINE, run_chain
from tasks.distlock.grant import LockGrant
from tasks.distlock.held import Held, check_budget
from tasks.distlock.runtime import Runtime, publish_handover, runtime
from tasks.distlock.store import DUPLICATE, PARKED, new_token
from tasks.distlock.tickets import SINCE, ParkedJob, Ticket, other_headers

F = TypeVar("F", bound=Callable[..., Any])

#: Seconds before a job whose lock Redis could not answer for is tried again
#: (times a jitter of 0.5-1.5): at least 1 s, the resolution of RabbitMQ's native
#: delayed delivery, and short, so it stays a broker countdown.
REDIS_DOWN_BACKOFF = 2.0


def message_user(message: Any) -> str:
    """The default key: the message's user."""
    return str(message["user_id"])


@dataclass(frozen=True)
class LockSpec:
    """How a task is locked: the key function and its overrides of the settings."""

    key: Callable[[Any], str]
    ttl: float | None
    when_redis_down: str | None

    def user_of(self, args: Any, kwargs: Any) -> str:
        """The lock key of a call: ``key`` applied to its first argument."""
        first = args[0] if args else (kwargs or {}).get("message")
        user = self.key(first)
        if not isinstance(user, str) or not user:
            raise InvalidMessage("user_id", f"the lock key must be a non-empty string, "
                                 f"got {user!r:.60}")
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
    if ttl is not None and ttl <= 0:
        raise ValueError(f"ttl must be positive, got {ttl!r}")
    spec = LockSpec(key, ttl, when_redis_down)

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def run_locked(task: Any, *args: Any, **kwargs: Any) -> Any:
            if getattr(task.request, INLINE, False):  # chain.py holds the lock for it
                return fn(task, *args, **kwargs)
            return LockedCall(spec, task, fn, args, kwargs).run()

        run_locked.__user_lock__ = spec  # type: ignore[attr-defined]
        return run_locked  # type: ignore[return-value]

    return decorate


class LockedCall:
    """One delivery of a locked task: acquire or park, run, release, go on with the
    user's parked jobs."""

    def __init__(self, spec: LockSpec, task: Any, fn: Callable[..., Any], args: Any,
                 kwargs: Any) -> None:
        self.spec, self.task, self.fn, self.args, self.kwargs = spec, task, fn, args, kwargs
        self.rt: Runtime = runtime()
        self.user = spec.user_of(args, kwargs)
        self.ticket = Ticket.from_request(task.request)
        self.ttl = spec.ttl or self.rt.cfg.lock_ttl
        self.job = ParkedJob(task=task.name, id=str(task.request.id), args=list(args),
                             kwargs=dict(kwargs), since=self.ticket.since or time.time(),
                             headers=other_headers(task.request))

    def run(self) -> Any:
        token = new_token()
        try:
            attempt = self.rt.store.acquire(
                self.user, token, self.ttl, self.ticket.seq, self.ticket.epoch,
                self.job.to_json(), self.ticket.handover, self.rt.cfg.lock_gap_timeout)
        except LockUnavailable as exc:
            return self.redis_down(exc)
        if attempt.status == PARKED:
            events.busy(self.task.name, self.job.id, self.user, attempt.seq)
            return self.parked()
        if attempt.status == DUPLICATE:
            events.duplicate(self.task.name, self.job.id, self.user, attempt.seq)
            raise Ignore()
        grant = LockGrant(self.user, token, attempt.seq, attempt.fence)
        self.task.request.user_lock = grant
        held = Held(self.rt, grant, self.ttl, self.job.id, self.ticket.waited())
        try:
            return held.run(lambda: self.fn(self.task, *self.args, **self.kwargs))
        finally:
            handover = held.release()
            if held.outcome == "done":
                run_chain(self.rt, self.user, handover, self.task.request, self.ttl)
            elif handover is not None:
                publish_handover(self.user, handover)

    def parked(self) -> None:
        """End this delivery: its job now waits in Redis and runs when handed over.

        It returns (Celery acknowledges it as a success that did nothing) rather than
        raising Ignore: Celery builds and formats two tracebacks for an Ignore, which
        made a park cost several times a short job's whole run and slowed every
        other user's jobs behind a busy user. ``recur_settled`` tells a scheduler
        dispatch (scheduler/calls.py) not to finish its row: the run that does the
        work settles it.
        """
        self.task.request.recur_settled = True

    def redis_down(self, exc: LockUnavailable) -> Any:
        """Fail closed (re-enqueue the job) unless this task opted out."""
        mode = self.spec.when_redis_down or self.rt.cfg.lock_when_redis_down
        if mode == "run-unlocked":
            events.unlocked(self.task.name, self.job.id, self.user, exc)
            self.task.request.user_lock = None
            return self.fn(self.task, *self.args, **self.kwargs)
        check_budget(self.rt.cfg, self.job.id, self.user, self.ticket.waited())
        delay = REDIS_DOWN_BACKOFF * random.uniform(0.5, 1.5)
        events.redis_down(self.task.name, self.job.id, self.user, delay, exc)
        headers = {**(self.task.request.headers or {}), SINCE: self.job.since}
        self.task.signature_from_request(self.task.request, countdown=delay,
                                         headers=headers).apply_async()
        raise Ignore()
