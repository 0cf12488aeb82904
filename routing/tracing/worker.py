"""A Celery worker's tracing hooks (connected when ``tasks`` is imported).

A prefork (or solo) worker starts tracing in each pool process, on
``worker_process_init``: OpenTelemetry's exporters run threads, which a fork
does not copy. A threads worker starts it once, on ``worker_init``. The main
process checks the configuration first, so a tracing set-up that cannot work
is one ``recur: …`` line and exit code 2, not a pool of failing children. With
tracing off each hook returns at its first test: nothing is imported.
"""

from __future__ import annotations

import sys
from typing import Any

from celery.signals import worker_init, worker_process_init, worker_process_shutdown
from celery.signals import worker_shutdown as worker_stopping

from config.errors import EXIT_ERROR, ConfigError
from routing import tracing


def forks(worker: Any) -> bool:
    """Whether the worker's pool sends ``worker_process_init`` (prefork, solo)."""
    from celery.concurrency import get_implementation

    pool = get_implementation(getattr(worker, "pool_cls", "prefork"))
    return pool.__module__.rsplit(".", 1)[-1] in ("prefork", "solo")


@worker_init.connect
def trace_worker(sender: Any = None, **_: Any) -> None:
    """Check the set-up; a threads worker starts tracing here."""
    try:
        tracing.check()
        if not forks(sender):
            tracing.setup("worker")
    except ConfigError as exc:
        print(f"recur: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_ERROR) from exc


@worker_process_init.connect
def trace_pool_process(**_: Any) -> None:
    tracing.setup("worker")


@worker_process_shutdown.connect
@worker_stopping.connect
def flush_spans(**_: Any) -> None:
    tracing.shutdown()
