"""The worker process's event loop for ``async def`` tasks (tasks/aio.py runs them on it),
kept running whatever the tasks' code does.

User code cannot take the loop down: a ``loop.stop()``, or a KeyboardInterrupt or
SystemExit raised by a task nobody awaits (one the user's coroutine started and left
running), is logged in one line and the loop runs on; such a task's other exceptions
are logged in one line naming the async task that started it. A coroutine that blocks
the loop (``time.sleep``, a long computation, a blocking library) is named, with its
line, in one warning by a watchdog thread once the loop has not answered for
BLOCKED_AFTER seconds, and the loop's return is logged with how long it was blocked.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
import weakref
from contextvars import ContextVar
from typing import Any

log = logging.getLogger("recur.aio")

#: Seconds the loop may go without answering before the watchdog names who blocks it.
BLOCKED_AFTER = 1.0
#: (task name, request) of the async task running in the current asyncio task (and
#: inherited by the tasks it starts).
BOUND: ContextVar[tuple[str, Any] | None] = ContextVar("recur_bound_request", default=None)
#: The frame function (in tasks/aio.py) that awaits a task's coroutine.
RUNNER = "_run_bound"

#: The async task (its BOUND) that started each asyncio task a task's coroutine started.
_STARTED_BY: weakref.WeakKeyDictionary[asyncio.Future[Any], tuple[str, Any]] = (
    weakref.WeakKeyDictionary()
)
_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_loop_pid = 0


def worker_loop() -> asyncio.AbstractEventLoop:
    """This process's event loop, started on its own thread on first use."""
    global _loop, _loop_pid
    with _lock:
        if _loop is None or _loop_pid != os.getpid() or _loop.is_closed():
            loop = asyncio.new_event_loop()
            loop.set_exception_handler(_unretrieved)
            loop.set_task_factory(_new_task)
            serving = threading.Thread(
                target=_serve, args=(loop,), name="recur-asyncio", daemon=True
            )
            serving.start()
            threading.Thread(
                target=_watch, args=(loop, serving), name="recur-asyncio-watch", daemon=True
            ).start()
            _loop, _loop_pid = loop, os.getpid()
        return _loop


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    """Run ``loop`` for good (see the module doc)."""
    while not loop.is_closed():
        try:
            loop.run_forever()
        except BaseException as exc:  # every other async task of the process needs the loop
            log.error(
                "event loop: %s raised out of a task nobody awaits: %s; the loop runs on",
                type(exc).__name__,
                exc,
            )
            continue
        if not loop.is_closed():
            log.error("event loop: an async task stopped it (loop.stop()); the loop runs on")


def _unretrieved(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """asyncio's report of an error nobody handled (a task nobody awaits that raised), in
    one line naming the coroutine and the async task that started it."""
    exc, task = context.get("exception"), context.get("future") or context.get("task")
    what = context.get("message", "unhandled error")
    if isinstance(task, asyncio.Task):
        coro = task.get_coro()
        what += f": {getattr(coro, '__qualname__', coro)}"
        bound = _STARTED_BY.get(task)
        if bound is not None:
            what += f" (started by task {bound[0]}, task id {getattr(bound[1], 'id', '?')})"
    if exc is not None:
        what += f": {type(exc).__name__}: {exc}"
    log.error("event loop: %s", what)


def _new_task(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
    """asyncio's task, remembering which async task's coroutine started it."""
    task = asyncio.Task(coro, loop=loop, **kwargs)
    bound = BOUND.get()  # the starter's context: create_task runs in it
    if bound is not None:
        _STARTED_BY[task] = bound
    return task


def _watch(loop: asyncio.AbstractEventLoop, serving: threading.Thread) -> None:
    """Ping the loop; when it has not answered for BLOCKED_AFTER seconds, name the code
    it is running in one warning, and say once when it answers again."""
    while serving.is_alive() and not loop.is_closed():
        answered, sent = threading.Event(), time.monotonic()
        try:
            loop.call_soon_threadsafe(answered.set)
        except RuntimeError:  # closed
            return
        if answered.wait(BLOCKED_AFTER):
            time.sleep(BLOCKED_AFTER / 4)
            continue
        log.warning(
            "event loop blocked for %.1fs by %s: every async task of process %d waits "
            "(await, or asyncio.to_thread for blocking calls)",
            time.monotonic() - sent,
            _culprit(serving.ident),
            os.getpid(),
        )
        while serving.is_alive() and not answered.wait(BLOCKED_AFTER):
            pass
        log.warning("event loop free again after %.1fs", time.monotonic() - sent)


def _culprit(thread_id: int | None) -> str:
    """The async task (and its line) the loop's thread is running now."""
    frame = sys._current_frames().get(thread_id or 0)
    innermost = frame
    while frame is not None:
        caller = frame.f_back
        if caller is not None and caller.f_code.co_name == RUNNER:
            code = frame.f_code
            return (
                f"task {caller.f_locals.get('task_name')} ({code.co_qualname} at "
                f"{code.co_filename}:{frame.f_lineno})"
            )
        frame = caller
    if innermost is None:
        return "unknown code"
    code = innermost.f_code
    return f"{code.co_qualname} at {code.co_filename}:{innermost.f_lineno}"
