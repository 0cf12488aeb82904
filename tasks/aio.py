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

A KeyboardInterrupt or SystemExit of a coroutine is carried to its pool thread and
raised there (failing that run, named by tasks/outcome.py as for a sync task), not on
the loop, where asyncio would end the loop's thread (tasks/aio_loop.py keeps the loop
running and names a task that blocks it). The hard limit counts from the run's start
on the loop: waiting for a loop another task blocks is not the run's time; a run the
loop cannot start within its hard limit is given up, and never starts later.

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
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded, TimeLimitExceeded

from tasks.aio_loop import BOUND as _BOUND
from tasks.aio_loop import worker_loop

Limits = tuple[float | None, float | None]
log = logging.getLogger("recur.aio")


class _Raised:
    """A coroutine's KeyboardInterrupt or SystemExit, returned to its pool thread: raised
    in an asyncio task, it is raised again out of ``run_forever``, ending the loop."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


#: Reschedules of its own job the running async task asked for, in order.
_DEFERRED: ContextVar[list[Any] | None] = ContextVar("recur_deferred_writes", default=None)
#: The worker's own (hard, soft) limits, set by tasks.worker when it starts.
_worker_limits: Limits = (None, None)


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


class _Run:
    """Where one run stands, as its pool thread and the loop both see it."""

    def __init__(self) -> None:
        self.started, self.given_up, self.started_at = threading.Event(), threading.Event(), 0.0

    def result(self, future: concurrent.futures.Future[Any], hard: float | None) -> Any:
        """The coroutine's result, waiting at most ``hard`` seconds from its start on the
        loop: time spent waiting for a loop another task blocks is not this run's (but
        a loop that does not start it within ``hard`` gives it up too)."""
        if hard is not None and not self.started.wait(hard):
            raise concurrent.futures.TimeoutError
        left = None if hard is None else self.started_at + hard - time.monotonic()
        return future.result(timeout=left)


async def _run_bound(task_name: str, request: Any, coro: Coroutine[Any, Any, Any],
                     soft: float | None, deferred: list[Any], run: _Run) -> Any:
    given_up = run.given_up
    if given_up.is_set():  # its run was given up before the (blocked) loop came to it
        coro.close()
        return None
    run.started_at = time.monotonic()
    run.started.set()
    _BOUND.set((task_name, request))
    _DEFERRED.set(deferred)
    deadline, began, obeyed = asyncio.timeout(soft), run.started_at, False
    try:
        async with deadline:
            result = await coro
        if inspect.iscoroutine(result):
            result.close()
            raise TypeError(
                f"task {task_name} returned a coroutine it never awaited "
                f"({result.__qualname__}): await it"
            )
        return result
    except TimeoutError:
        if deadline.expired():
            raise SoftTimeLimitExceeded(f"soft time limit ({soft:g}s) exceeded") from None
        raise
    except asyncio.CancelledError:
        obeyed = True
        raise
    except (KeyboardInterrupt, SystemExit) as exc:
        return _Raised(exc)  # raised by its pool thread
    finally:
        if given_up.is_set() and not obeyed:  # a copy delivered again may have overlapped
            log.error(
                "task %s: its coroutine ended only %.1fs after it started, past its "
                "hard time limit (it ignored being cancelled); the message was "
                "delivered again meanwhile",
                task_name,
                time.monotonic() - began,
            )


def run_blocking(task: Any, coro: Coroutine[Any, Any, Any]) -> Any:
    """Run ``coro`` (a call of ``task``'s async function) on the worker loop and wait."""
    hard, soft = limits_of(task)
    deferred: list[Any] = []
    run = _Run()
    future = asyncio.run_coroutine_threadsafe(
        _run_bound(task.name, task.request, coro, soft, deferred, run), worker_loop()
    )
    try:
        result = run.result(future, hard)
    except concurrent.futures.TimeoutError:
        if future.done():  # the coroutine's own TimeoutError
            raise
        run.given_up.set()
        future.cancel()
        raise TimeLimitExceeded(f"hard time limit ({hard:g}s) exceeded") from None
    finally:  # what it asked for before it returned, raised or was given up
        write_deferred(task, deferred)
    if isinstance(result, _Raised):
        raise result.exc
    return result


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
