"""Tasks for bench.bench_distlock, loaded by its workers with
``--include bench.distlock_tasks``: the same short job under recur's
``@user_lock`` and under the plain retry-on-busy pattern (redis-py's ``Lock``,
``self.retry()`` when the user is busy), each recording its run."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from celery.signals import task_postrun, task_prerun, task_received

from config.settings import settings
from routing.redis_client import get_redis
from tasks.app import app
from tasks.base import MessageTask
from tasks.distlock import user_lock


def runs_key() -> str:
    return f"{settings().key_prefix}:bench:runs"


def retries_key() -> str:
    return f"{settings().key_prefix}:bench:busy-retries"


def arrivals_key() -> str:
    return f"{settings().key_prefix}:bench:arrivals"


def received_key() -> str:
    return f"{settings().key_prefix}:bench:received"


@task_received.connect
def record_received(request: Any = None, **_: Any) -> None:
    """When the worker (its main process) took a job's message from the broker: the
    time from here to the job's start is how long it waited in that worker, e.g. in
    a busy child process's queue."""
    if (request is not None and request.name in ("bench.locked_job", "bench.retry_job")
            and _user(request.args) == "other"):
        get_redis().hsetnx(received_key(), str(request.id), time.time())


@task_prerun.connect
def record_arrival(task: Any = None, args: Any = None, **_: Any) -> None:
    """When a job's message first reached a worker (before it ran or parked): no
    schedule can start it earlier, so this bounds the hot user's makespan too."""
    if (task is not None and task.name in ("bench.locked_job", "bench.retry_job")
            and _user(args) == "hot"):
        get_redis().hsetnx(arrivals_key(), str(args[0]["id"]), time.time())


def _user(args: Any) -> str:
    """The benchmark's kind of user ("hot", "other" or "spread") of a job's arguments.

    Each recording hook records only the jobs its figure reads (arrivals: the hot
    user's; received: the other users'). Recording every delivery cost a Redis
    round trip per hook in each worker, and most on the mode with the most
    deliveries (the hot user's parks), which is measurement, not the lock.
    """
    user = args[0].get("user_id", "") if args and isinstance(args[0], dict) else ""
    return str(user).rstrip("0123456789")


#: This process's runs not yet written to Redis.
_unwritten: list[str] = []


def record(message: Any, started: float, task_id: str) -> None:
    """Keep the run in memory: the jobs a releaser runs in one chain are written
    together when its delivery ends (``flush``), so the benchmark's own Redis
    round trip is not counted in the gap between two of a user's jobs."""
    entry = {"id": message["id"], "user": message["user_id"], "start": started,
             "end": time.time(), "pid": os.getpid(), "task_id": task_id}
    _unwritten.append(json.dumps(entry))


@task_postrun.connect
def flush(**_: Any) -> None:
    """Write the runs of the delivery that just ended (its chain's included)."""
    if _unwritten:
        get_redis().rpush(runs_key(), *_unwritten)
        _unwritten.clear()


def work(message: Any, task_id: str) -> None:
    started = time.time()
    time.sleep(float(message["payload"]["ms"]) / 1000)
    record(message, started, task_id)


@app.task(bind=True, base=MessageTask, name="bench.locked_job")
@user_lock()
def locked_job(self: MessageTask, message: Any) -> None:
    """recur's lock: a busy user's job is parked and handed over in order."""
    work(self.message(message), str(self.request.id))


@app.task(bind=True, base=MessageTask, name="bench.retry_job", max_retries=None)
def retry_job(self: MessageTask, message: Any) -> None:
    """The baseline: try the lock, retry at the back of the queue while the user is busy."""
    msg = self.message(message)
    lock = get_redis().lock(f"{settings().key_prefix}:bench:plain-lock:{msg['user_id']}",
                            timeout=30)
    if not lock.acquire(blocking=False):
        get_redis().incr(retries_key())
        raise self.retry(countdown=0)
    try:
        work(msg, str(self.request.id))
    finally:
        lock.release()
