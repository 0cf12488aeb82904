"""``@rate_limit``: at most ``rate`` starts per key, across every worker and process.

Stack it under ``@app.task(bind=True, base=MessageTask, ...)``, beside ``@user_lock``
in either order (lock outside: the limit is checked while holding the lock)::

    @app.task(bind=True, base=MessageTask, name="tasks.call_partner")
    @rate_limit(key=lambda message: message["user_id"], rate="10/s", burst=1)
    def call_partner(self, message): ...

Each delivery asks Redis (routing/gcra.lua) whether its key may start a job now. If
not, the job is given the key's next free slot (GCRA, reserve on refusal: the jobs of
one key refused in turn get slots in that order) and waits for it (wait.py): a short
wait in the broker (published again with a countdown), a long one in the due-jobs
store. The delivery is then acknowledged: it held its worker slot for one Redis call,
spent no delivery, and nothing spins. At its slot the job's copy runs without a new
reservation, provided the runs that really started allow it (a copy that comes late
cannot bunch up with its key's later jobs). A job published with ``apply_async``
takes its place in its key's plan when it is published (submit.py): one that would
wait long goes straight to the store, due at its slot, and never reaches a worker
before it. docs/flow-control.md says what is guaranteed.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from config.errors import InvalidMessage, InvalidRateLimit, ServiceUnavailable
from config.lazy_metrics import counter
from config.settings import settings
from routing.redis_client import get_redis, out_of_memory
from scheduler.bounds import Limits, job_key_problem
from scheduler.wire import dispatch_of
from tasks.flow import limiter
from tasks.flow.rates import Rate, parse_rate
from tasks.flow.wait import send_back

F = TypeVar("F", bound=Callable[..., Any])
log = logging.getLogger("recur.flow")

LIMITED = counter("recur_rate_limited", "Deliveries deferred by @rate_limit (refused a "
                  "start now, sent back to wait for their slot), by bucket and task.",
                  ["bucket", "task"])
#: What a deferred delivery returns (its run ends there; its copy waits for the slot).
DEFERRED_RESULT = "recur:deferred"
#: Seconds before a job whose limit Redis could not answer for is tried again (times
#: a jitter of 0.5-1.5): the limit fails closed, as the user lock does.
REDIS_DOWN_BACKOFF = 2.0
#: Seconds: a job whose slot is at most this far away (clock and timing jitter) sleeps
#: until it and starts, holding its worker slot that long: less than a trip through the
#: broker costs (a publish, a delivery).
SLEEP_AT_MOST = 0.005
#: How many such sleeps one delivery takes at most before it goes round the broker.
NEAR_TRIES = 4


@dataclass(frozen=True)
class RateSpec:
    """How a task is limited: the key function and the rate."""

    key: Callable[[Any], Any]
    rate: Rate

    def key_of(self, message: Any) -> str:
        """The limited key of a message: ``key`` applied to it, a non-empty string."""
        value = self.key(message)
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str) or not value:
            raise InvalidMessage("rate_limit", f"the rate limit key must be a non-empty "
                                 f"string, got {value!r:.60}")
        # It names a Redis key: bounded and printable, as a job key is.
        problem = job_key_problem(value, Limits.of(settings()), "rate limit key")
        if problem is not None:
            raise InvalidMessage("rate_limit", problem)
        return value


def rate_limit(key: Callable[[Any], Any], rate: str, burst: int | None = None
               ) -> Callable[[F], F]:
    """Start at most ``rate`` jobs per ``key(message)`` over every worker, ``burst`` at
    once (default 1: evenly spaced). Bad arguments raise InvalidRateLimit here."""
    if not callable(key):
        raise InvalidRateLimit(f"key must be a function of the message, got {key!r:.40}")
    spec = RateSpec(key, parse_rate(rate, burst))

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def run_limited(task: Any, *args: Any, **kwargs: Any) -> Any:
            deferred = LimitedCall(spec, task, args, kwargs).deferred()
            return deferred if deferred is not None else fn(task, *args, **kwargs)

        run_limited.__rate_limit__ = spec  # type: ignore[attr-defined]
        return run_limited  # type: ignore[return-value]

    return decorate


class LimitedCall:
    """One delivery of a rate-limited task: start now, or go back to the store."""

    def __init__(self, spec: RateSpec, task: Any, args: Any, kwargs: Any) -> None:
        self.spec, self.task, self.args, self.kwargs = spec, task, args, kwargs
        self.message = args[0] if args else (kwargs or {}).get("message")
        if not isinstance(self.message, dict):
            raise InvalidMessage("message", "a rate-limited task's first argument must be "
                                 "its message")
        self.key = spec.key_of(self.message)
        self.bucket = str(self.message.get("bucket") or self.message.get("kind") or "")
        dispatch = dispatch_of(task.request)
        #: The job's identity across its deferrals: the row it is (or becomes).
        self.job = dispatch.job_key if dispatch is not None else str(self.message["id"])

    def deferred(self) -> str | None:
        """None when the job may start now; else what the deferred delivery returns."""
        try:
            decision = self.ask()
        except ServiceUnavailable as exc:
            delay = REDIS_DOWN_BACKOFF * random.uniform(0.5, 1.5)
            where = send_back(self.task, self.args, self.kwargs, self.job, delay)
            oom = out_of_memory(exc)  # said once a minute (event redis_oom): INFO here
            log.log(logging.INFO if oom else logging.ERROR
                    if isinstance(exc, limiter.LimitRefused) else logging.WARNING,
                    "not run: rate limit of key %s unavailable for job %s (%s): %s; "
                    "back in the %s for %.1fs (fail closed)", self.key, self.job,
                    self.task.name, exc, where, delay)
            return f"{DEFERRED_RESULT} key={self.key} {'redis-oom' if oom else 'redis-down'}"
        if decision.allowed:
            return None
        LIMITED.labels(self.bucket, self.task.name).inc()
        where = send_back(self.task, self.args, self.kwargs, self.job, decision.wait)
        log.info("deferred: key %s over %s: job %s (%s) waits in the %s for its slot in "
                 "%.3fs", self.key, self.spec.rate, self.job, self.task.name, where,
                 decision.wait)
        return f"{DEFERRED_RESULT} key={self.key} in={decision.wait:.3f}s"

    def ask(self) -> limiter.Decision:
        """The limit's answer; a slot at most SLEEP_AT_MOST away is slept for here."""
        decision = self.take()
        for _ in range(NEAR_TRIES):
            if decision.allowed or decision.wait > SLEEP_AT_MOST:
                break
            time.sleep(decision.wait)
            decision = self.take()
        return decision

    def take(self) -> limiter.Decision:
        return limiter.take(get_redis(), settings().key_prefix, self.key, self.job,
                            self.bucket, self.spec.rate, near=SLEEP_AT_MOST,
                            forgive=limiter.forgiven_lateness(self.spec.rate))
