"""A worker's own metrics: tasks run by bucket, task and outcome, their run time, and
how late a stored job's run started (its due time to the start of the run).

``recur worker`` with RECUR_METRICS_PORT gives the worker a fresh
PROMETHEUS_MULTIPROC_DIR, so its prefork children's counts are served by the
main process's endpoint (started here, at worker start-up); a threads pool
writes there too. A run costs one counter increment and two histogram observes,
all in ``task_postrun``. A worker whose metrics nobody reads (no RECUR_METRICS_PORT,
no PROMETHEUS_MULTIPROC_DIR: the default) connects neither per-run hook and never
imports prometheus_client (config/lazy_metrics.py).
"""

from __future__ import annotations

import os
import shutil
import time
from typing import Any

from celery.signals import task_postrun, task_prerun, worker_init, worker_shutdown

from config.buckets_in_use import bucket_table
from config.lazy_metrics import counter, histogram
from config.settings import settings
from tasks.distlock.job import PARKED_RESULT
from tasks.flow.rate_limit import DEFERRED_RESULT
from tasks.metrics.serve import MULTIPROC_ENV, exports_metrics, serve_metrics
from tasks.settle import RUN_STATE, RunState

TASKS = counter("recur_worker_tasks", "Task runs finished, by bucket, task and state.",
                ["bucket", "task", "state"])
RUNTIME = histogram("recur_worker_task_seconds", "Task run time, by bucket and task.",
                    ["bucket", "task"],
                    buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300, 900, 1800))
#: Bounds that answer "what share of runs start more than a minute late".
LATENESS_BUCKETS = (0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)
LATENESS = histogram("recur_worker_lateness_seconds", "How late a stored job's run started: "
                     "its due time to the start of the run, by bucket and task (0: on time, "
                     "or pulled forward early).", ["bucket", "task"], buckets=LATENESS_BUCKETS)
#: A delivery that did not start its run: parked behind its user's job, or deferred to
#: its rate limit's slot (its run starts on a later delivery).
NOT_STARTED = (PARKED_RESULT, DEFERRED_RESULT)
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
    """In the main process, before the pool starts (prefork children inherit the hooks)."""
    cfg = settings()
    if exports_metrics(cfg):
        connect_run_hooks()
    serve_metrics(cfg, what="worker")


def connect_run_hooks() -> None:
    """Count every run from now on (idempotent)."""
    task_prerun.connect(task_started, weak=False, dispatch_uid="recur.metrics.prerun")
    task_postrun.connect(task_finished, weak=False, dispatch_uid="recur.metrics.postrun")


@worker_shutdown.connect
def remove_metrics_dir(**_: Any) -> None:
    """The directory ``recur worker`` made for this worker's processes goes with it."""
    path = os.environ.get(MULTIPROC_ENV, "")
    if os.path.basename(path).startswith(WORKER_DIR_PREFIX):
        shutil.rmtree(path, ignore_errors=True)


def task_started(task_id: str = "", **_: Any) -> None:
    _started[task_id] = time.monotonic()


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
        RUNTIME.labels(bucket, task.name).observe(time.monotonic() - started)
    late = lateness(task.request, retval)
    if late is not None:
        LATENESS.labels(bucket, task.name).observe(late)


def lateness(request: Any, retval: Any) -> float | None:
    """Seconds from a stored job's due time to the start of this run (0 when it started
    early); None for a run without a due time (not from the store, a stale copy dropped
    unrun, a delivery parked or deferred)."""
    run = getattr(request, RUN_STATE, None)
    if not isinstance(run, RunState) or run.started_at is None or run.dispatch is None:
        return None
    due_us = run.dispatch.due_us
    if due_us is None or (isinstance(retval, str) and retval.startswith(NOT_STARTED)):
        return None
    return max(0.0, run.started_at - due_us / 1e6)
