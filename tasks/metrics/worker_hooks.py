"""A worker's own metrics: tasks run by bucket, task and outcome, and their run time.

``recur worker`` with RECUR_METRICS_PORT gives the worker a fresh
PROMETHEUS_MULTIPROC_DIR, so its prefork children's counts are served by the
main process's endpoint (started here, at worker start-up).
"""

from __future__ import annotations

import time
from typing import Any

from celery.signals import task_postrun, task_prerun, worker_init
from prometheus_client import Counter, Histogram

from config.buckets import BUCKETS_BY_QUEUE
from config.settings import settings
from tasks.metrics.serve import serve_metrics

TASKS = Counter("recur_worker_tasks", "Task runs finished, by bucket, task and state.",
                ["bucket", "task", "state"])
RUNTIME = Histogram("recur_worker_task_seconds", "Task run time, by bucket.", ["bucket"],
                    buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300, 900, 1800))
_started: dict[str, float] = {}


def _bucket(task: Any) -> str:
    info = getattr(task.request, "delivery_info", None) or {}
    queue = info.get("routing_key") or ""
    bucket = BUCKETS_BY_QUEUE.get(queue)
    return bucket.name if bucket is not None else (queue or "direct")


@worker_init.connect
def serve_worker_metrics(**_: Any) -> None:
    serve_metrics(settings(), what="worker")


@task_prerun.connect
def task_started(task_id: str = "", **_: Any) -> None:
    _started[task_id] = time.monotonic()


@task_postrun.connect
def task_finished(task_id: str = "", task: Any = None, state: str = "", **_: Any) -> None:
    started = _started.pop(task_id, None)
    if task is None:
        return
    bucket = _bucket(task)
    TASKS.labels(bucket, task.name, state or "UNKNOWN").inc()
    if started is not None:
        RUNTIME.labels(bucket).observe(time.monotonic() - started)
