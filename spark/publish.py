"""``--sink broker``: publish seeded messages as Celery tasks, in confirmed batches.

One broker connection per sink (the seed job opens one per partition), through
the scheduler's confirm-batching publisher (scheduler/publisher.py): a batch is
put on a confirm-mode channel and waits once for all its confirms, so ``load``
returns only when the broker holds every message of it. Each message is checked
and routed as ``apply_async`` does it (its schedule, the message contract, its
bucket's queue) and goes out as a plain task message of ``tasks.process_message``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from config.settings import settings
from routing.queues import TASK_EXCHANGE, declare_topology
from routing.recurrence import check_call
from routing.router import queue_for_message
from scheduler.publisher import ConfirmingPublisher
from scheduler.store.bulk import BulkResult
from scheduler.task_message import TaskMessage, plain_message
from spark.transform import TASK

CONFIRM_TIMEOUT = 60.0


def seed_message(task: str, message: Any) -> tuple[str, str, TaskMessage]:
    """(exchange, queue, message) of one seeded message; raises InvalidMessage (or
    InvalidSchedule) as ``apply_async`` would, before anything is published."""
    check_call([message], {})
    return TASK_EXCHANGE.name, queue_for_message(message), plain_message(task, [message])


class BrokerPublisher:
    """Publishes the message of each due-jobs ``args`` to ``task`` (``tasks.process_message``)."""

    def __init__(self, broker_url: str, task: str = TASK) -> None:
        cfg = settings()
        self.task = task
        self.publisher = ConfirmingPublisher(broker_url, TASK_EXCHANGE.name, CONFIRM_TIMEOUT,
                                             on_connect=lambda conn: declare_topology(conn, cfg))
        self.publisher.connect()  # an unreachable broker fails the sink at once
        self.published = 0

    def load(self, lines: Sequence[str]) -> BulkResult:
        """Publish one batch (``args`` JSON texts) and wait for its confirms."""
        self.publisher.publish_messages(
            [seed_message(self.task, json.loads(args)["args"][0]) for args in lines])
        self.published += len(lines)
        return BulkResult(len(lines), len(lines))

    def close(self) -> None:
        self.publisher.close()

    def __enter__(self) -> BrokerPublisher:
        return self

    def __exit__(self, _t: type[BaseException] | None, _e: BaseException | None,
                 _tb: TracebackType | None) -> None:
        self.close()
