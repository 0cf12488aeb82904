"""Tasks that misbehave on purpose, for the fault tests. Loaded by test workers
with ``--include tests.support.fault_tasks``; they use recur's real base class,
routing and queues."""

from __future__ import annotations

import os
import signal
from typing import Any

from config.settings import settings
from routing.redis_client import get_redis
from tasks.app import app
from tasks.base import MessageTask


def attempts_key(message_id: str) -> str:
    return f"{settings().key_prefix}:test:attempts:{message_id}"


def count_attempt(message: Any) -> int:
    return int(get_redis().incr(attempts_key(message["id"])))


@app.task(bind=True, base=MessageTask, name="tests.crash_worker")
def crash_worker(self: MessageTask, message: Any) -> None:
    """Kill the worker process running it, every time."""
    self.message(message)
    count_attempt(message)
    os.kill(os.getpid(), signal.SIGKILL)


@app.task(bind=True, base=MessageTask, name="tests.always_fail")
def always_fail(self: MessageTask, message: Any) -> None:
    """Raise an error that is not retried."""
    self.message(message)
    n = count_attempt(message)
    raise ValueError(f"boom {message['id']} attempt {n}")


@app.task(bind=True, base=MessageTask, name="tests.always_transient",
          autoretry_for=(ConnectionError,), retry_backoff=0.1, retry_backoff_max=0.5,
          retry_jitter=False)
def always_transient(self: MessageTask, message: Any) -> None:
    """Raise an error the task retries, until its retries run out."""
    self.message(message)
    n = count_attempt(message)
    raise ConnectionError(f"downstream unavailable for {message['id']} attempt {n}")


@app.task(bind=True, base=MessageTask, name="tests.count_run")
def count_run(self: MessageTask, message: Any) -> None:
    """Count the run and succeed (a one-shot job: its row is finished)."""
    self.message(message)
    count_attempt(message)
