"""Tasks for the scheduler tests, loaded by workers with ``--include``."""

from __future__ import annotations

import time
from typing import Any

from config.settings import settings
from routing.redis_client import get_redis
from tasks import completions
from tasks.app import app
from tasks.base import MessageTask

INCLUDE = ("--include", "tests.support.scheduler_tasks")


def attempts_key(message_id: str) -> str:
    return f"{settings().key_prefix}:test:sched-attempts:{message_id}"


@app.task(bind=True, base=MessageTask, name="tests.retry_once")
def retry_once(self: MessageTask, message: Any) -> None:
    """Ask to be retried (``payload.retry_in`` seconds) on the first run, complete on the next."""
    msg = self.message(message)
    if int(get_redis().incr(attempts_key(msg["id"]))) == 1:
        raise self.retry(countdown=msg["payload"]["retry_in"])
    completions.record(get_redis(), settings(), completions.Completion(
        message_id=msg["id"], bucket=msg["bucket"], worker=self.worker_name,
        redelivered=self.redelivered, started=time.time(), finished=time.time()))
