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
#: Generous for a loaded 2-core machine (three scheduler processes start, Spark or
#: fault tests may run beside): the waits end as soon as their condition holds.
FILL_DEADLINE, REFILL_DEADLINE = 180, 120


class DepthWatch:
    """Samples a queue's ready count in the background; keeps the largest seen.

    A broker error does not end the watch (a frozen reading would make a still
    queue of the wrong size look steady): it reconnects, and ``samples`` tells
    the waits whether it is still reading."""

    def __init__(self, broker: Any, queue: str) -> None:
        self.broker, self.queue = broker, queue
        self.largest = self.last = self.samples = 0
        self.errors: list[str] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while not self.stopping.is_set():
            try:
                with self.broker.clone() as conn:
                    while not self.stopping.is_set():
                        self.last = queue_depth(conn, self.queue)
                        self.largest = max(self.largest, self.last)
                        self.samples += 1
                        self.stopping.wait(0.02)
            except Exception as exc:  # kept for the report, then reconnect
                self.errors.append(repr(exc))
                self.stopping.wait(0.5)

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(10)


def consume(broker: Any, queue: str, count: int, tag: str) -> None:
    """Take ``count`` messages off the queue, as workers would; each is one of this
    test's jobs (another publisher into the queue would void the count)."""
    with broker.channel() as channel:
        for _ in range(count):
            message = channel.basic_get(queue, no_ack=True)
            assert message is not None
            body = message.body if isinstance(message.body, str) else message.body.decode()
            assert tag in body, body[:300]


def steady(watch: DepthWatch, at_least: int) -> bool:
    """The queue holds at least ``at_least`` and did not grow for a second of readings."""
    before, samples = watch.last, watch.samples
    threading.Event().wait(1.0)
    return watch.samples > samples + 5 and watch.last >= at_least and watch.last == before


def test_three_schedulers_keep_the_queue_within_one_watermark(
        fresh_pg_url: str, broker: Any, start_scheduler: Any) -> None:
    store = DueStore.open(fresh_pg_url)
    now = datetime.now(UTC)
    jobs = recurring_jobs(3000, now - timedelta(seconds=1), every=60.0, runs=1,
                          buckets=("short",))
    tag = jobs[0].job_key.split("-")[0]  # this test's ids: "<tag>-<n>"
    store.schedule(jobs, now)
    store.close()
    env = worker_env(fresh_pg_url, RECUR_LOW_WATERMARK=str(LOW),
                     RECUR_HIGH_WATERMARK=str(HIGH), RECUR_DRAIN_BATCH=str(BATCH))
    queue = BUCKETS_BY_NAME["short"].queue
    watch = DepthWatch(broker, queue)
    try:
        for n in range(3):
            start_scheduler(env, name=f"scheduler-{n}")
        wait_for(lambda: steady(watch, LOW), FILL_DEADLINE, "the queue filled and steady")
        for _ in range(3):  # workers take most of it: all three schedulers refill at once
            consume(broker, queue, queue_depth(broker, queue) - LOW // 2, tag)
            wait_for(lambda: steady(watch, LOW), REFILL_DEADLINE, "the queue refilled")
    finally:
        watch.stop()
    assert LOW <= watch.largest <= HIGH + BATCH, (watch.largest, watch.errors)
