"""No-op tasks for the scheduler cycle benchmark (workers load them with ``--include``)."""

from __future__ import annotations

from typing import Any

from celery import Task

from config.settings import settings
from routing.redis_client import get_redis
from tasks.app import app
from tasks.base import MessageTask


def runs_key() -> str:
    return f"{settings().key_prefix}:bench:runs"


@app.task(bind=True, base=MessageTask, name="bench.noop_recurring")
def noop_recurring(self: MessageTask, message: Any) -> None:
    """Count the run, then reschedule itself at once (one row update)."""
    get_redis().incr(runs_key())
    self.apply_async((message,), countdown=0)


@app.task(bind=True, base=Task, name="bench.noop_plain")
def noop_plain(self: Task, message: Any) -> None:
    """Count the run: the same work as above, without the store."""
    get_redis().incr(runs_key())
