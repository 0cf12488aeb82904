"""Where a job refused by its rate limit waits for its slot.

* **A short wait** (under RECUR_SCHEDULE_THRESHOLD, as for any countdown, and at most
  routing/waits.py's MAX_WAIT): the job's message is published again into the broker's
  wait levels (routing/waits.py), which hand it to its bucket queue at its slot, and
  this delivery ends (acknowledged). No worker holds it meanwhile (so it holds no
  worker slot and no place in a prefetch window), and a worker crash or a Redis
  restart loses nothing: one publish, no store write, no scheduler dispatch. It keeps
  its task id, its dispatch header (a scheduler-dispatched job's row stays dispatched
  to it), its place in its user's line when a ``@user_lock`` inside the limit numbered
  it, and it spends no delivery (a new message).
* **A long wait**: the due-jobs store, due at the slot, never pulled forward: a
  scheduler-dispatched job reschedules its own row (token-checked), a published one
  is written as a row keyed by its message id.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from celery import Task

from config.settings import settings
from routing.router import queue_for_message
from routing.tracing.headers import LINK_HEADER
from routing.waits import wait_route
from scheduler.calls import utcnow
from scheduler.wire import DISPATCH_HEADER, dispatch_of, request_header
from tasks.distlock.job import SEQ, SINCE, LockGrant
from tasks.settle import live_dispatch, run_state


def send_back(task: Any, args: Any, kwargs: Any, job: str, wait: float) -> str:
    """Make the job start in ``wait`` seconds; where it waits: "broker" or "store"."""
    if wait < settings().schedule_threshold and wait_in_broker(task, args, kwargs, wait):
        return "broker"
    wait_in_store(task, args, kwargs, job, wait)
    return "store"


def wait_in_broker(task: Any, args: Any, kwargs: Any, wait: float) -> bool:
    """Publish this job again to reach its queue in ``wait`` seconds (see the module
    doc); False when the wait is longer than the broker's wait levels hold."""
    route = wait_route(wait)
    if route is None:
        return False
    exchange, bits = route
    request = task.request
    headers = {**carried_headers(request), **bits}
    dispatch = dispatch_of(request)
    if dispatch is not None:  # its row stays dispatched to the copy: no finish now
        headers[DISPATCH_HEADER] = live_dispatch(request, dispatch).header()
        run_state(request).settled = True
    message = args[0] if args else (kwargs or {}).get("message")
    # Celery's own publish (MessageTask.apply_async would make a dispatched job's re-send
    # a reschedule of its row), to the wait levels, with its queue's routing key.
    Task.apply_async(task, args, kwargs, task_id=request.id, retries=request.retries or 0,
                     headers=headers, exchange=exchange,
                     routing_key=queue_for_message(message))
    return True


def carried_headers(request: Any) -> dict[str, Any]:
    """The control headers the copy keeps: its lock ticket (its place in its user's
    line), and its trace link. A delivery that ran under its user's held lock is done
    for the lock (its task id and number count as run): its copy goes without a number
    and takes a new one when it is published, at the end of its user's line."""
    held = isinstance(getattr(request, "user_lock", None), LockGrant)
    names = (SINCE, LINK_HEADER) if held else (SEQ, SINCE, LINK_HEADER)
    return {name: value for name in names
            if (value := request_header(request, name)) is not None}


def wait_in_store(task: Any, args: Any, kwargs: Any, job: str, wait: float) -> None:
    """Make the job due again in ``wait`` seconds through the due-jobs store, never
    pulled forward: its own row (token-checked) when the scheduler dispatched it,
    else a row keyed by ``job`` (its message id)."""
    options: dict[str, Any] = {"eta": utcnow() + timedelta(seconds=wait), "not_before": True}
    if dispatch_of(task.request) is None:
        options["job_key"] = job
    task.apply_async(args, kwargs, **options)
