"""The high watermark holds for the bucket, not per scheduler: three schedulers
filling one queue keep it within the high watermark plus one batch.

A fill may stop short of the high watermark: a batch counts as in flight until
its lane clears it, also once its messages are in the queue (the reading is
only ever too cautious, scheduler/store/fill_lock.py), and under load several such
batches overlap. So "refilled" means back above the low watermark, where the
schedulers stop filling, not at the high one."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from config.buckets_in_use import BUCKETS_BY_NAME
from routing.broker import queue_depth
from scheduler.store import DueStore
from tests.support.processes import wait_for
from tests.support.scheduler_support import recurring_jobs, worker_env

LOW, HIGH, BATCH = 100, 300, 50


class DepthWatch:
    """Samples a queue's ready count in the background; keeps the largest seen."""

    def __init__(self, broker: Any, queue: str) -> None:
        self.conn, self.queue = broker.clone(), queue
        self.largest = self.last = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        with self.conn:
            while not self.stopping.is_set():
                self.last = queue_depth(self.conn, self.queue)
                self.largest = max(self.largest, self.last)
                self.stopping.wait(0.02)

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(10)


def consume(broker: Any, queue: str, count: int) -> None:
    """Take ``count`` messages off the queue, as workers would."""
    with broker.channel() as channel:
        for _ in range(count):
            message = channel.basic_get(queue, no_ack=True)
            assert message is not None


def steady(watch: DepthWatch, at_least: int) -> bool:
    """The queue holds at least ``at_least`` and did not grow for a second."""
    before = watch.last
    threading.Event().wait(1.0)
    return watch.last >= at_least and watch.last == before


def test_three_schedulers_keep_the_queue_within_one_watermark(
        fresh_pg_url: str, broker: Any, start_scheduler: Any) -> None:
    store = DueStore.open(fresh_pg_url)
    now = datetime.now(UTC)
    store.schedule(recurring_jobs(3000, now - timedelta(seconds=1), every=60.0, runs=1,
                                  buckets=("short",)), now)
    store.close()
    env = worker_env(fresh_pg_url, RECUR_LOW_WATERMARK=str(LOW),
                     RECUR_HIGH_WATERMARK=str(HIGH), RECUR_DRAIN_BATCH=str(BATCH))
    queue = BUCKETS_BY_NAME["short"].queue
    watch = DepthWatch(broker, queue)
    try:
        for n in range(3):
            start_scheduler(env, name=f"scheduler-{n}")
        wait_for(lambda: steady(watch, LOW), 90, "the queue filled and steady")
        for _ in range(3):  # workers take most of it: all three schedulers refill at once
            consume(broker, queue, watch.last - LOW // 2)
            wait_for(lambda: steady(watch, LOW), 60, "the queue refilled")
    finally:
        watch.stop()
    assert LOW <= watch.largest <= HIGH + BATCH, watch.largest
