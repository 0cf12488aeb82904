"""A worker's own metrics: tasks run by bucket, task and outcome, and their run time.

``recur worker`` with RECUR_METRICS_PORT gives the worker a fresh
PROMETHEUS_MULTIPROC_DIR, so its prefork children's counts are served by the
main process's endpoint (started here, at worker start-up).
"""

from __future__ import annotations

import os
import shutil
import time
from typing import Any

from celery.signals import task_postrun, task_prerun, worker_init, worker_shutdown
from prometheus_client import Counter, Histogram

from config.buckets_in_use import bucket_table
from config.settings import settings
from tasks.distlock.job import PARKED_RESULT
from tasks.metrics.serve import MULTIPROC_ENV, serve_metrics

TASKS = Counter("recur_worker_tasks", "Task runs finished, by bucket, task and state.",
                ["bucket", "task", "state"])
RUNTIME = Histogram("recur_worker_task_seconds", "Task run time, by bucket.", ["bucket"],
                    buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300, 900, 1800))
_started: dict[str, float] = {}
#: Prefix of the directory ``recur worker`` makes (tasks/cli/worker.py worker_env).
WORKER_DIR_PREFIX = "recur-worker-metrics-"


def _bucket(task: Any) -> str:
    info = getattr(task.request, "delivery_info", None) or {}
    queue = info.get("routing_key") or ""
    bucket = bucket_table().by_queue.get(queue)
    return bucket.name if bucket is not None else (queue or "direct")


@worker_init.connect
def serve_worker_metrics(**_: Any) -> None:
    serve_metrics(settings(), what="worker")


@worker_shutdown.connect
def remove_metrics_dir(**_: Any) -> None:
    """The directory ``recur worker`` made for this worker's processes goes with it."""
    path = os.environ.get(MULTIPROC_ENV, "")
    if os.path.basename(path).startswith(WORKER_DIR_PREFIX):
        shutil.rmtree(path, ignore_errors=True)


@task_prerun.connect
def task_started(task_id: str = "", **_: Any) -> None:
    _started[task_id] = time.monotonic()


@task_postrun.connect
def task_finished(task_id: str = "", task: Any = None, state: str = "", retval: Any = None,
                  **_: Any) -> None:
    started = _started.pop(task_id, None)
    if task is None:
        return
    bucket = _bucket(task)
    if state == "SUCCESS" and isinstance(retval, str) and retval.startswith(PARKED_RESULT):
        state = "PARKED"  # a locked job parked behind its user's running job
    TASKS.labels(bucket, task.name, state or "UNKNOWN").inc()
    if started is not None:
        RUNTIME.labels(bucket).observe(time.monotonic() - started)
