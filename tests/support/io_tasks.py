"""Async tasks for the I/O bucket tests (workers load them with RECUR_IMPORTS).

Each run appends "start" and "end" records (message id, user, attempt, whether
the broker redelivered it, pid, time) to a Redis list.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

from config.settings import settings
from routing.redis_client import get_redis
from tasks.app import app
from tasks.base import MessageTask
from tasks.distlock import user_lock


def runs_key() -> str:
    return f"{settings().key_prefix}:test:io:runs"


def record(event: str, task: MessageTask, message: Any, **extra: Any) -> None:
    get_redis().rpush(runs_key(), json.dumps({
        "ev": event, "id": message["id"], "user": message["user_id"], "pid": os.getpid(),
        "redelivered": task.redelivered, "t": time.time(), **extra}))


def read_runs() -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in get_redis().lrange(runs_key(), 0, -1)]


@app.task(bind=True, base=MessageTask, name="tests.io_sleep")
async def io_sleep(self: MessageTask, message: Any) -> None:
    """Wait ``payload["s"]`` seconds on the first attempt (``payload["again_s"]`` after);
    with ``payload["stubborn"]`` it ignores being cancelled once."""
    msg = self.message(message)
    attempt = int(get_redis().incr(f"{runs_key()}:attempts:{msg['id']}"))
    record("start", self, msg, attempt=attempt)
    seconds = msg["payload"]["s"] if attempt == 1 else msg["payload"].get("again_s", 0)
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        record("cancelled", self, msg, attempt=attempt)
        if not msg["payload"].get("stubborn"):
            raise
        await asyncio.sleep(seconds)
    record("end", self, msg, attempt=attempt)


@app.task(bind=True, base=MessageTask, name="tests.io_locked")
@user_lock()
async def io_locked(self: MessageTask, message: Any) -> None:
    """Hold the user's lock for ``payload["ms"]`` milliseconds of awaiting."""
    msg = self.message(message)
    record("start", self, msg, n=msg["payload"]["n"])
    await asyncio.sleep(msg["payload"]["ms"] / 1000)
    record("end", self, msg, n=msg["payload"]["n"])


@app.task(bind=True, base=MessageTask, name="tests.io_cycle")
async def io_cycle(self: MessageTask, message: Any) -> None:
    """A stored recurring job: wait ``payload["s"]`` seconds, then reschedule itself
    ``payload["every"]`` seconds later until ``payload["left"]`` runs are done (the last
    run finishes the job). Each run records its run number and dispatch token."""
    from scheduler.wire import dispatch_of

    msg = self.message(message)
    dispatch = dispatch_of(self.request)
    pay, token = msg["payload"], None if dispatch is None else dispatch.token
    record("start", self, msg, left=pay["left"], token=token)
    await asyncio.sleep(pay["s"])
    record("end", self, msg, left=pay["left"], token=token)
    if pay["left"] > 1:
        self.apply_async(({**msg, "payload": {**pay, "left": pay["left"] - 1}},),
                         countdown=pay["every"])
