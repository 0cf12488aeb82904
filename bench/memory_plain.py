"""Plain Celery, the memory benchmark's baseline: ``celery -A bench.memory_plain worker``.

No recur module is imported: a no-op task that counts its run in Redis and sends
itself again at once, so a few hundred messages keep the worker as busy as
recur's no-op recurring jobs keep its own.
"""

from __future__ import annotations

import os
from typing import Any

import redis
from celery import Celery
from kombu import Queue

QUEUE = "plainmem"
app = Celery("plainmem", broker=os.environ.get("RECUR_BROKER_URL"), set_as_current=False)
app.conf.update(task_serializer="json", accept_content=["json"], task_ignore_result=True,
                task_acks_late=True, task_queues=[Queue(QUEUE, durable=True)],
                task_default_queue=QUEUE, broker_connection_retry_on_startup=True)
_redis = redis.Redis.from_url(os.environ.get("RECUR_REDIS_URL", "redis://127.0.0.1:6379/0"))


def runs_key() -> str:
    return f"{os.environ.get('RECUR_KEY_PREFIX', 'recur')}:bench:plainruns"


def stop_key() -> str:
    """Set: the jobs stop going round (the benchmark's end of the cycle)."""
    return f"{os.environ.get('RECUR_KEY_PREFIX', 'recur')}:bench:plainstop"


@app.task(name="benchplain.noop")
def noop(message: Any) -> None:
    """Count the run and go round again: the same work as recur's no-op recurring task."""
    _redis.incr(runs_key())
    if not _redis.exists(stop_key()):
        noop.apply_async((message,))
