"""Locked tasks for the distlock tests and benchmark. Loaded by test workers with
``--include tests.support.fault_tasks,tests.support.locked_tasks``.

Each run appends a "start" and an "end" record (user, job id, fencing token,
pid, times) to a Redis list, so a test can check for overlaps, order and
exactly-once. RECURTEST_RECORD_URL sends the records to another Redis than
the lock's (the Redis-down test stops the lock's Redis).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import redis

from config.settings import settings
from tasks.app import app
from tasks.base import MessageTask
from tasks.distlock import fencing_token, user_lock
from tests.support.recorder import recorder


def runs_key() -> str:
    return f"{settings().key_prefix}:test:locked:runs"


def record(event: str, task: MessageTask, message: Any, **extra: Any) -> None:
    entry = {"ev": event, "id": message["id"], "user": message["user_id"],
             "fence": fencing_token(task), "pid": os.getpid(), "t": time.time(), **extra}
    recorder().rpush(runs_key(), json.dumps(entry))


def read_runs(client: redis.Redis) -> list[dict[str, Any]]:
    """Every record so far, in the order they were written."""
    return [json.loads(raw) for raw in client.lrange(runs_key(), 0, -1)]


@app.task(bind=True, base=MessageTask, name="tests.locked_work")
@user_lock()
def locked_work(self: MessageTask, message: Any) -> None:
    """Hold the user's lock for ``payload["ms"]`` milliseconds (``payload["again_ms"]``
    when it runs again), recording the run; ``payload["exit_first"]`` names what its first
    run raises then (SystemExit, KeyboardInterrupt or MemoryError)."""
    msg = self.message(message)
    payload = msg["payload"] or {}
    attempt = int(recorder().incr(f"{runs_key()}:attempts:{msg['id']}"))
    record("start", self, msg, attempt=attempt)
    ms = payload.get("ms", 5) if attempt == 1 else payload.get("again_ms", payload.get("ms", 5))
    time.sleep(float(ms) / 1000)
    record("end", self, msg, attempt=attempt)
    if attempt == 1 and payload.get("exit_first"):  # what no Exception is, once
        raise {"SystemExit": SystemExit, "KeyboardInterrupt": KeyboardInterrupt,
               "MemoryError": MemoryError}[payload["exit_first"]](f"{msg['id']} exits")


@app.task(bind=True, base=MessageTask, name="tests.unlocked_work")
def unlocked_work(self: MessageTask, message: Any) -> None:
    """The same work without the lock: the benchmark's comparison."""
    msg = self.message(message)
    time.sleep(float((msg["payload"] or {}).get("ms", 5)) / 1000)


@app.task(bind=True, base=MessageTask, name="tests.locked_fail")
@user_lock()
def locked_fail(self: MessageTask, message: Any) -> None:
    """Fail every time (not retried), recording each attempt."""
    msg = self.message(message)
    attempt = int(recorder().incr(f"{runs_key()}:attempts:{msg['id']}"))
    record("start", self, msg, attempt=attempt)
    record("end", self, msg, attempt=attempt)
    raise ValueError(f"locked job {msg['id']} fails, attempt {attempt}")
