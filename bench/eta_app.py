"""Plain Celery (no recur) for the countdown baseline: ``celery -A bench.eta_app worker``.

A classic queue, so ``countdown`` messages go straight to the worker, which
holds them unacknowledged until due (Celery's own eta handling).
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery
from kombu import Queue

QUEUE = "bench-eta"

app = Celery("bench_eta", broker=os.environ["RECUR_BROKER_URL"], set_as_current=False)
app.conf.update(task_serializer="json", accept_content=["json"],
                task_queues=[Queue(QUEUE, durable=True)], task_default_queue=QUEUE,
                worker_prefetch_multiplier=0)


@app.task(name="bench.noop_eta")
def noop_eta(message: Any) -> None:
    """Does nothing: only the waiting matters here."""
