"""The worker class: ``-Q <bucket>`` alone gives the bucket's profile.

``recur worker long`` passes the long bucket's profile explicitly. This class
makes plain ``celery -A tasks worker -Q long`` do the same: when the worker
consumes exactly one bucket queue, options left at Celery's defaults
(pool, concurrency, prefetch multiplier, time limits) take the bucket's values
(``-P prefork`` is Celery's default, so on a threads bucket it means threads).
"""

from __future__ import annotations

from typing import Any

from celery.apps.worker import Worker
from celery.concurrency.prefork import TaskPool as PreforkPool
from celery.concurrency.thread import TaskPool as ThreadsPool

from config.buckets import Bucket
from config.buckets_in_use import bucket_table
from tasks import aio

#: Seconds between two wake-ups of a threads-pool worker's event loop (see below).
ACK_FLUSH_INTERVAL = 0.01


def single_bucket(queues: Any) -> Bucket | None:
    """The bucket when ``queues`` (a -Q value) names exactly one bucket queue."""
    if isinstance(queues, str):
        queues = [q for q in queues.split(",") if q]
    if not queues or len(queues) != 1:
        return None
    return bucket_table().by_queue.get(queues[0])


class BucketWorker(Worker):  # type: ignore[misc]
    """Celery's worker, with the bucket profile applied before the pool starts."""

    def setup_instance(self, queues: Any = None, **kwargs: Any) -> None:
        bucket = single_bucket(queues)
        if bucket is not None:
            self.apply_profile(bucket)
        me: Any = self
        aio.set_worker_limits(me.time_limit, me.soft_time_limit)
        super().setup_instance(queues=queues, **kwargs)

    def on_consumer_ready(self, consumer: Any) -> None:
        flush_acks_often(consumer)
        super().on_consumer_ready(consumer)

    def apply_profile(self, bucket: Bucket) -> None:
        """Fill in what the command line left at Celery's defaults."""
        me: Any = self  # Celery sets these attributes in setup_defaults
        if me.pool_cls in (PreforkPool, "prefork"):  # Celery's default: the bucket's pool
            me.pool_cls = bucket.pool
        if not me.concurrency:
            me.concurrency = bucket.concurrency
        if me.prefetch_multiplier == me.app.conf.worker_prefetch_multiplier:
            me.prefetch_multiplier = bucket.prefetch
        if me.time_limit is None:
            me.time_limit = bucket.time_limit
        if me.soft_time_limit is None:
            me.soft_time_limit = bucket.soft_time_limit


def flush_acks_often(consumer: Any) -> None:
    """Wake a threads-pool worker's event loop every ACK_FLUSH_INTERVAL seconds.

    A pool thread that finished a task queues its late ack for the consumer's
    event loop, which runs it only when it next wakes: on broker traffic or a
    timer, up to a second later (celery/celery#6941). Meanwhile the message
    counts against the prefetch window, so with the io bucket's 200 threads the
    worker sat idle with 200 finished, unacknowledged messages and ran about 100
    tasks a second. A no-op timer bounds the delay (100 wake-ups a second cost
    well under 1 % of a core)."""
    if isinstance(consumer.pool, ThreadsPool):
        consumer.timer.call_repeatedly(ACK_FLUSH_INTERVAL, _wake)


def _wake() -> None:
    """Nothing: the event loop runs its queued acks when it wakes for this timer."""
