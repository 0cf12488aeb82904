"""``recur worker BUCKET``: exec the ``celery worker`` a user would type, with the
bucket's profile and the settings filled in, so signals, logs and ``celery
inspect`` behave exactly as Celery's own. It runs Celery's ``worker`` command through
``config/worker_entry.py``, without the rest of Celery's command line (its other
commands and plugins: 20 MB in every worker process, docs/operations.md#memory).
"""

from __future__ import annotations

import os
import shutil
import sys

import click

from config.buckets import Bucket
from config.settings import settings
from tasks.cli.group import cli
from tasks.cli.params import bucket_arg


def celery_executable() -> str:
    """The ``celery`` next to this interpreter (a venv need not be activated)."""
    local = os.path.join(os.path.dirname(sys.executable), "celery")
    return local if os.path.exists(local) else (shutil.which("celery") or "celery")


def worker_argv(bucket: Bucket, extra: tuple[str, ...] = ()) -> list[str]:
    """The ``celery worker`` command line that serves ``bucket`` with its profile."""
    return [
        sys.executable, "-m", "config.worker_entry", "-A", "tasks", "worker",
        "-Q", bucket.queue, "-n", f"{bucket.name}@%h",
        "-P", bucket.pool, "-c", str(bucket.concurrency),
        "--prefetch-multiplier", str(bucket.prefetch),
        "--time-limit", str(bucket.time_limit),
        "--soft-time-limit", str(bucket.soft_time_limit),
        "-l", settings().log_level, *extra,
    ]


def load_tasks() -> None:
    """Import recur's tasks and yours (RECUR_IMPORTS): a module that cannot be imported
    is one clear error here, before any process starts."""
    import tasks  # noqa: F401 - registers recur's tasks
    from tasks.imports import import_task_modules

    import_task_modules(settings().imports)


@cli.command(context_settings={"ignore_unknown_options": True})
@click.argument("bucket", callback=bucket_arg)
@click.argument("celery_args", nargs=-1, type=click.UNPROCESSED)
def worker(bucket: Bucket, celery_args: tuple[str, ...]) -> None:
    """Run a worker for BUCKET (extra arguments go to celery worker)."""
    load_tasks()
    argv = worker_argv(bucket, celery_args)
    os.execve(argv[0], argv, worker_env())


def worker_env() -> dict[str, str]:
    """With RECUR_METRICS_PORT, a fresh directory where the prefork children's metrics meet."""
    if not settings().metrics_port:
        return dict(os.environ)
    import tempfile

    from tasks.metrics.serve import MULTIPROC_ENV
    from tasks.metrics.worker_hooks import WORKER_DIR_PREFIX

    return {**os.environ, MULTIPROC_ENV: tempfile.mkdtemp(prefix=WORKER_DIR_PREFIX)}
