"""Async user code that misbehaves, for tests/faults/test_misbehaving_io_tasks.py (an io
worker loads them with RECUR_IMPORTS).

Each run appends records (event, message id, pid, time, extra) to a Redis list, as
tests/support/io_tasks.py does; ``victim`` is the well-behaved neighbour whose runs
show what a misbehaving coroutine costs the others of its process.
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
    return f"{settings().key_prefix}:test:mbio:runs"


def record(event: str, message: Any, **extra: Any) -> None:
    get_redis().rpush(
        runs_key(),
        json.dumps(
            {"ev": event, "id": message["id"], "pid": os.getpid(), "t": time.time(), **extra}
        ),
    )


def read_runs() -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in get_redis().lrange(runs_key(), 0, -1)]


@app.task(bind=True, base=MessageTask, name="tests.mbio.victim")
async def victim(self: MessageTask, message: Any) -> None:
    """A good neighbour: awaits ``payload["s"]`` seconds."""
    record("start", message, redelivered=self.redelivered)
    await asyncio.sleep(message["payload"]["s"])
    record("end", message)


@app.task(bind=True, base=MessageTask, name="tests.mbio.locked_victim")
@user_lock(ttl=1)
async def locked_victim(self: MessageTask, message: Any) -> None:
    """A good neighbour under its user's lock (a 1 s lease the watchdog extends)."""
    grant = self.request.user_lock
    record("start", message, fence=grant.fence, redelivered=self.redelivered)
    await asyncio.sleep(message["payload"]["s"])
    record("end", message, fence=grant.fence)


@app.task(bind=True, base=MessageTask, name="tests.mbio.block")
async def block(self: MessageTask, message: Any) -> None:
    """Blocks the event loop: ``time.sleep`` (or a CPU loop with ``payload["spin"]``)."""
    record("start", message)
    seconds = message["payload"]["s"]
    if message["payload"].get("spin"):
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            pass
    else:
        time.sleep(seconds)
    record("end", message)


@app.task(bind=True, base=MessageTask, name="tests.mbio.stubborn")
async def stubborn(self: MessageTask, message: Any) -> None:
    """Swallows every CancelledError and keeps going for ``payload["s"]`` seconds."""
    record("start", message, redelivered=self.redelivered)
    until = time.monotonic() + message["payload"]["s"]
    while time.monotonic() < until:
        try:
            await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            record("cancelled", message)
    record("end", message)


@app.task(bind=True, base=MessageTask, name="tests.mbio.forever")
async def forever(self: MessageTask, message: Any) -> None:
    """Awaits a future nobody completes."""
    record("start", message)
    try:
        await asyncio.get_running_loop().create_future()
    except asyncio.CancelledError:
        record("cancelled", message)
        raise


class Unencodable(Exception):
    """An exception Celery cannot rebuild from its args (and whose args are not JSON)."""

    def __init__(self, what: object, extra: int) -> None:
        super().__init__(what)
        self.extra = extra


def _base_exception(kind: str) -> BaseException:
    return {
        "KeyboardInterrupt": KeyboardInterrupt("from user code"),
        "SystemExit": SystemExit(3),
        "GeneratorExit": GeneratorExit("from user code"),
        "unencodable": Unencodable(object(), 1),
    }[kind]


@app.task(bind=True, base=MessageTask, name="tests.mbio.raises")
async def raises(self: MessageTask, message: Any) -> None:
    """Raises ``payload["kind"]`` (a BaseException subclass, or an unencodable error)."""
    record("start", message, redelivered=self.redelivered)
    await asyncio.sleep(0)
    raise _base_exception(message["payload"]["kind"])


@app.task(bind=True, base=MessageTask, name="tests.mbio.returns_object", ignore_result=False)
async def returns_object(self: MessageTask, message: Any) -> Any:
    """Returns a value JSON cannot encode (its result is stored)."""
    record("start", message, redelivered=self.redelivered)
    await asyncio.sleep(0)
    return object()


async def _fail_later(message: Any, after: float) -> None:
    await asyncio.sleep(after)
    record("orphan_raises", message)
    kind = message["payload"].get("kind")
    raise _base_exception(kind) if kind else RuntimeError(f"orphan of {message['id']} fails")


@app.task(bind=True, base=MessageTask, name="tests.mbio.orphan")
async def orphan(self: MessageTask, message: Any) -> None:
    """Starts a background task that outlives it and raises (``payload["kind"]``) later."""
    record("start", message)
    asyncio.get_running_loop().create_task(_fail_later(message, message["payload"]["after"]))
    record("end", message)


@app.task(bind=True, base=MessageTask, name="tests.mbio.loop_abuse")
async def loop_abuse(self: MessageTask, message: Any) -> None:
    """Stops, closes or replaces the event loop, or runs ``asyncio.run`` inside it."""
    record("start", message, redelivered=self.redelivered)
    how = message["payload"]["how"]
    loop = asyncio.get_running_loop()
    if how == "stop":
        loop.stop()
        await asyncio.sleep(0.1)
    elif how == "close":
        loop.close()
    elif how == "replace":
        asyncio.set_event_loop(asyncio.new_event_loop())
    elif how == "run":
        asyncio.run(asyncio.sleep(0))
    record("end", message)


@app.task(bind=True, base=MessageTask, name="tests.mbio.sync_on_io")
def sync_on_io(self: MessageTask, message: Any) -> None:
    """A plain function on the io bucket."""
    record("start", message)
    time.sleep(message["payload"]["s"])
    record("end", message)


async def _never_awaited(message: Any) -> None:
    record("inner_ran", message)


@app.task(bind=True, base=MessageTask, name="tests.mbio.returns_coroutine")
async def returns_coroutine(self: MessageTask, message: Any) -> Any:
    """Returns a coroutine it never awaited."""
    record("start", message, redelivered=self.redelivered)
    return _never_awaited(message)
