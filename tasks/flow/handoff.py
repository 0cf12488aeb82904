"""The rate limit asked as a worker hands its jobs to the pool: many in one round trip.

Without this, each pool process asks Redis for its job's slot (tasks/flow/rate_limit.py)
and waits for the answer before it starts: one more blocking round trip per job, in
the process that runs the jobs, which on a busy machine costs far more wall time than
the script's own work. Here the worker's main process asks instead, as each job is
handed over (Celery's task strategy, ``MessageTask.Strategy``): a thread of its own
sends the jobs that arrived meanwhile in one write, reads their answers, and hands the
jobs to the pool from the event loop; an allowed job carries a mark
(tasks/flow/handoff_mark.py) that its pool process trusts, so it starts without a call.
Nothing else changes: a refused job got its slot as a delivery would have, and its pool
process sends it back to wait for it; a job Redis did not answer for, or whose start
comes later than its rate forgives, is asked again in its pool process, as before. Only
a limit asked first (a task's own outermost ``@rate_limit``, or a bucket file default)
is asked here: one under ``@user_lock`` is asked while the lock is held. Nor are the
first jobs of a worker whose pool has not started one yet, nor a rate that forgives a
late start less than MIN_FORGIVEN.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from celery.app.task import Context
from celery.worker import state as worker_state
from celery.worker.strategy import default

from config.settings import settings
from routing.redis_client import get_redis
from tasks.flow import handoff_mark, limiter
from tasks.flow.defaults import limited_somewhere
from tasks.flow.rate_limit import RateSpec, identity
from tasks.flow.submit import spec_of

log = logging.getLogger("recur.flow")
#: Seconds: a rate that forgives a start less late than this (a high rate, or one just
#: under a whole number a second) is asked in the pool process: a job's way from its
#: hand-off to its start (a few jobs ahead of it) would often be longer.
MIN_FORGIVEN = 0.02


@dataclass
class Pending:
    """A job between its delivery and its hand-over to the pool."""

    req: Any
    handle: Any
    spec: RateSpec
    key: str
    job: str
    bucket: str
    allowed: bool = False
    asked_at: float = 0.0


def strategy(task: Any, app: Any, consumer: Any, **options: Any) -> Any:
    """Celery's default strategy; for a task limited first, on a worker with an event
    loop, each job's limit is asked before the job is handed to the pool."""
    hub = getattr(consumer, "hub", None)
    if hub is None or not limited_first(task):
        return default(task, app, consumer, **options)
    checker, handle = checker_for(hub), consumer.on_task_request

    def on_task_request(req: Any) -> None:
        # A pool that never started a job may not be up yet (a worker starting): its
        # first jobs would reach it too late for a mark; they ask in the pool process.
        item = pending_of(task, req, handle) if worker_state.all_total_count[0] else None
        if item is None:
            handle(req)
        else:
            checker.offer(item)

    return default(task, app, Rehandled(consumer, on_task_request), **options)


def pending_of(task: Any, req: Any, handle: Any) -> Pending | None:
    """The job to ask the limit for, or None: not limited first, or a message the
    limit cannot key (its pool process refuses it by name, as without this)."""
    try:
        message = req.args[0] if req.args else (req.kwargs or {}).get("message")
        spec = spec_at_handoff(task, message)
        if spec is None or limiter.forgiven_lateness(spec.rate) < MIN_FORGIVEN:
            return None
        key, bucket, job = identity(spec, Context(req.request_dict), message)
    except Exception:
        return None
    return Pending(req, handle, spec, key, job, bucket)


def limited_first(task: Any) -> bool:
    """Whether ``task``'s jobs may have a limit asked before anything else runs."""
    run = getattr(task.run, "__func__", task.run)
    if getattr(run, "__rate_limit__", None) is not None:
        return getattr(run, "__rate_limit_fn__", None) is run
    return limited_somewhere() and getattr(task, "rate_limit_defaults", True)


def spec_at_handoff(task: Any, message: Any) -> RateSpec | None:
    """The limit asked first for ``message``'s job (None: none, or not first)."""
    return spec_of(task, message) if limited_first(task) else None


class Rehandled:
    """The consumer as the default strategy sees it, its jobs handed to ``on_task_request``."""

    def __init__(self, consumer: Any, on_task_request: Any) -> None:
        self._consumer, self.on_task_request = consumer, on_task_request

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)


class Checker:
    """The main process's thread that asks the limits, a batch per round trip."""

    def __init__(self, hub: Any) -> None:
        self.hub, self.cond, self.todo = hub, threading.Condition(), list[Pending]()
        self.thread = threading.Thread(target=self.run, name="recur-rate-handoff",
                                       daemon=True)
        self.thread.start()

    def offer(self, item: Pending) -> None:
        if not self.thread.is_alive():  # never expected: the job is not held up for it
            item.handle(item.req)
            return
        with self.cond:
            self.todo.append(item)
            self.cond.notify()

    def run(self) -> None:
        client, prefix = get_redis(), settings().key_prefix
        while True:
            with self.cond:
                while not self.todo:
                    self.cond.wait()
                batch, self.todo = self.todo, []
            try:
                ask(client, prefix, batch)
            except Exception:  # each job is still handed over, to be asked in the pool
                log.exception("rate limits at hand-off: %d jobs handed over unasked",
                              len(batch))
            finally:
                self.hub.call_soon(hand_over, batch)


def ask(client: Any, prefix: str, batch: list[Pending]) -> None:
    """One round trip for the batch's limits (mode ``handoff``: a refusal is counted as
    a busy return by the pool process, which sends the job back)."""
    calls = [limiter.take_args(prefix, p.key, p.job, p.bucket, p.spec.rate, mode="handoff",
                               forgive=limiter.forgiven_lateness(p.spec.rate))
             for p in batch]
    asked_at = time.time()
    for item, decision in zip(batch, limiter.take_many(client, calls), strict=True):
        item.allowed, item.asked_at = decision is not None and decision.allowed, asked_at


def hand_over(batch: list[Pending]) -> None:
    """In the event loop: mark the allowed jobs, hand every job to the pool in order."""
    for item in batch:
        fields = item.req.request_dict
        if item.allowed:
            fields[handoff_mark.HEADER] = handoff_mark.mark(item.asked_at)
        else:
            fields.pop(handoff_mark.HEADER, None)
        try:
            item.handle(item.req)
        except Exception:
            log.exception("job %s: could not be handed to the pool", item.job)


_CHECKERS: dict[tuple[int, int], Checker] = {}
_LOCK = threading.Lock()


def checker_for(hub: Any) -> Checker:
    """This process's checker for ``hub`` (a strategy is made again on each reconnect)."""
    at = (os.getpid(), id(hub))
    with _LOCK:
        found = _CHECKERS.get(at)
        if found is None or not found.thread.is_alive():
            found = _CHECKERS[at] = Checker(hub)
        return found
