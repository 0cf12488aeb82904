"""The worker class: ``-Q <bucket>`` alone gives the bucket's profile.

``recur worker long`` passes the long bucket's profile explicitly. This class
makes plain ``celery -A tasks worker -Q long`` do the same: when the worker
consumes exactly one bucket queue, options left at Celery's defaults
(pool, concurrency, prefetch multiplier, time limits) take the bucket's values
(``-P prefork`` is Celery's default, so on a threads bucket it means threads).
"""

from __future__ import annotations

import gc
from typing import Any

from celery.apps.worker import Worker
from celery.concurrency.prefork import TaskPool as PreforkPool
from celery.concurrency.thread import TaskPool as ThreadsPool

from config.buckets import Bucket
from config.buckets_in_use import bucket_table
from tasks import aio
from tasks.ack_flush import flush_acks_often
from tasks.due_timers import fire_every_due_timer
from tasks.thread_pool import HandBackThreadsPool, leave_if_cold


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

    def on_init_blueprint(self) -> None:
        me: Any = self  # a cold shutdown of a threads pool ends (tasks/thread_pool.py)
        if me.pool_cls is ThreadsPool:
            me.pool_cls = HandBackThreadsPool
        super().on_init_blueprint()

    def start(self) -> None:
        super().start()
        me: Any = self
        leave_if_cold(me.pool, me.exitcode)

    def on_start(self) -> None:
        super().on_start()
        freeze_before_fork()  # the pool step, next, forks the prefork children

    def on_consumer_ready(self, consumer: Any) -> None:
        flush_acks_often(consumer)
        fire_every_due_timer(getattr(consumer, "hub", None))  # before the loop is made
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


def freeze_before_fork() -> None:
    """Move every object the worker has made so far out of the garbage collector's reach.

    A prefork child shares the parent's memory until it writes to a page. A
    collection in the child writes to the header of every object it examines, so
    the first full collection copied nearly every page of the modules it shares:
    half of each child's 84 MB became its own. Frozen objects are never examined
    (they live as long as the process anyway), so those pages stay shared; a
    threads pool's collections skip them too. docs/operations.md#memory."""
    gc.collect()
    gc.freeze()
