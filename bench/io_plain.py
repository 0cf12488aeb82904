"""Plain Celery baseline of the I/O benchmark: ``celery -A bench.io_plain worker -P threads``.

The same request per run; the next run is Celery's own ``countdown`` (an ETA
message held by the worker until due).
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery

from bench.io_client import sync_get
from bench.io_record import EVERY, now, record_sync

QUEUE = "plainio"
app = Celery("plainio", broker=os.environ.get("RECUR_BROKER_URL"), set_as_current=False)
app.conf.update(task_serializer="json", accept_content=["json"], task_ignore_result=True,
                task_acks_late=True, task_default_queue=QUEUE, worker_prefetch_multiplier=1,
                broker_connection_retry_on_startup=True)


@app.task(bind=True, name="benchplain.io")
def plain_io(self: Any, key: str, due: float) -> None:
    started = now()
    sync_get()
    record_sync(due, started)
    plain_io.apply_async((key, now() + EVERY), countdown=EVERY)


@app.task(bind=True, name="benchplain.noop")
def plain_noop(self: Any, key: str, due: float) -> None:
    """The no-op cycle (bench_io ``celery_noop``): record, and run again ``EVERY`` later."""
    record_sync(due, now())
    plain_noop.apply_async((key, now() + EVERY), countdown=EVERY)
