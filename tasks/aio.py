"""``async def`` tasks: run on one event loop per worker process.

Each worker process owns one asyncio loop, on a daemon thread started the first
time an async task runs in that process (after a prefork child forked, so every
child has its own). Celery's pool thread (or process) that delivered the message
submits the coroutine to that loop and waits for it, so everything Celery does
around a task (late ack after the run, rejection into the dead-letter queue on
failure, redelivery after a crash, the dispatch-token check and reschedule of
tasks/settle.py, ``@user_lock``) happens exactly as for a plain task; what
is concurrent is the waiting: with the ``threads`` pool, hundreds of tasks wait
on the loop at once in one process (see docs/tasks.md for the measurements).

Time limits are the loop's, since a pool thread cannot be killed: at the soft
limit the coroutine is cancelled and the task fails with SoftTimeLimitExceeded;
at the hard limit the waiting thread gives up (cancelling it again) and the task
fails with TimeLimitExceeded. Both are dead-lettered like any failure.

Inside the coroutine ``self.request`` is the delivering request (bound in a
context variable per asyncio task), so ``self.apply_async`` reschedules the
task's own job and ``self.retry`` work as in a sync task. That reschedule is a
blocking store statement: run on the loop it would stall every other coroutine
of the process for a database round trip (one at a time, so at most one over that
round trip's time of reschedules per second, under load a few hundred). So it is
kept and written by the pool thread once the coroutine has returned (or raised),
still before the run settles and the message is acknowledged.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import os
import threading
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded, TimeLimitExceeded

Limits = tuple[float | None, float | None]

#: (task name, request) of the async task running in the current asyncio task.
_BOUND: ContextVar[tuple[str, Any] | None] = ContextVar("recur_bound_request", default=None)
#: Reschedules of its own job the running async task asked for, in order.
_DEFERRED: ContextVar[list[Any] | None] = ContextVar("recur_deferred_writes", default=None)
_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_loop_pid = 0
#: The worker's own (hard, soft) limits, set by tasks.worker when it starts.
_worker_limits: Limits = (None, None)


def worker_loop() -> asyncio.AbstractEventLoop:
    """This process's event loop, started on its own thread on first use."""
    global _loop, _loop_pid
    with _lock:
        if _loop is None or _loop_pid != os.getpid() or _loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="recur-asyncio",
                             daemon=True).start()
            _loop, _loop_pid = loop, os.getpid()
        return _loop


def set_worker_limits(hard: float | None, soft: float | None) -> None:
    """Record the worker's time limits (the threads pool does not enforce them)."""
    global _worker_limits
    _worker_limits = (hard or None, soft or None)


def bound_request(task_name: str) -> Any:
    """The request of ``task_name`` running in this asyncio task, if any."""
    bound = _BOUND.get()
    return bound[1] if bound is not None and bound[0] == task_name else None


def limits_of(task: Any) -> Limits:
    """(hard, soft) seconds for this run: the message's, else the task's, else the worker's."""
    hard, soft = getattr(task.request, "timelimit", None) or (None, None)
    return (hard or task.time_limit or _worker_limits[0],
            soft or task.soft_time_limit or _worker_limits[1])


def defer_write(call: Any) -> Any:
    """Inside an async task, keep ``call`` (its own job's store write, a
    tasks.settle.StoreCall) for the pool thread and return what ``apply_async``
    returns for it; None elsewhere (the caller writes it now)."""
    deferred = _DEFERRED.get()
    if deferred is None or call.reschedule_of is None:
        return None
    from scheduler.calls import ScheduledJob

    deferred.append(call)
    return ScheduledJob(call.job.job_key, call.job.due_at)


def write_deferred(task: Any, deferred: list[Any]) -> None:
    """Write the reschedules the coroutine asked for, on this (pool) thread."""
    from config.settings import settings

    for call in list(deferred):
        call.write(settings(), task.request)


async def _run_bound(task_name: str, request: Any, coro: Coroutine[Any, Any, Any],
                     soft: float | None, deferred: list[Any]) -> Any:
    _BOUND.set((task_name, request))
    _DEFERRED.set(deferred)
    if soft is None:
        return await coro
    deadline = asyncio.timeout(soft)
    try:
        async with deadline:
            return await coro
    except TimeoutError:
        if deadline.expired():
            raise SoftTimeLimitExceeded(f"soft time limit ({soft:g}s) exceeded") from None
        raise


def run_blocking(task: Any, coro: Coroutine[Any, Any, Any]) -> Any:
    """Run ``coro`` (a call of ``task``'s async function) on the worker loop and wait."""
    hard, soft = limits_of(task)
    deferred: list[Any] = []
    future = asyncio.run_coroutine_threadsafe(
        _run_bound(task.name, task.request, coro, soft, deferred), worker_loop())
    try:
        return future.result(timeout=hard)
    except concurrent.futures.TimeoutError:
        if future.done():  # the coroutine's own TimeoutError
            raise
        future.cancel()
        raise TimeLimitExceeded(f"hard time limit ({hard:g}s) exceeded") from None
    finally:  # what it asked for before it returned, raised or was given up
        write_deferred(task, deferred)


def settle(task: Any, result: Any) -> Any:
    """A task's return value; a coroutine (an ``async def`` task) is run to its end first."""
    if inspect.iscoroutine(result):
        return run_blocking(task, result)
    return result


def blocking(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A bound task function that runs ``fn`` (async) on the worker loop and waits;
    for wrappers such as ``@user_lock`` that must hold something for the whole run."""
    if not inspect.iscoroutinefunction(fn):
        return fn

    @functools.wraps(fn)
    def run(task: Any, *args: Any, **kwargs: Any) -> Any:
        return run_blocking(task, fn(task, *args, **kwargs))

    return run
