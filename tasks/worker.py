"""The worker class: ``-Q <bucket>`` alone gives the bucket's profile.

``recur worker long`` passes the long bucket's profile explicitly. This class
makes plain ``celery -A tasks worker -Q long`` do the same: when the worker
consumes exactly one bucket queue, options left at Celery's defaults
(concurrency, prefetch multiplier, time limits) take the bucket's values.
"""

from __future__ import annotations

from typing import Any

from celery.apps.worker import Worker

from config.buckets import BUCKETS_BY_QUEUE, Bucket


def single_bucket(queues: Any) -> Bucket | None:
    """The bucket when ``queues`` (a -Q value) names exactly one bucket queue."""
    if isinstance(queues, str):
        queues = [q for q in queues.split(",") if q]
    if not queues or len(queues) != 1:
        return None
    return BUCKETS_BY_QUEUE.get(queues[0])


class BucketWorker(Worker):  # type: ignore[misc]
    """Celery's worker, with the bucket profile applied before the pool starts."""

    def setup_instance(self, queues: Any = None, **kwargs: Any) -> None:
        bucket = single_bucket(queues)
        if bucket is not None:
            self.apply_profile(bucket)
        super().setup_instance(queues=queues, **kwargs)

    def apply_profile(self, bucket: Bucket) -> None:
        """Fill in what the command line left at Celery's defaults."""
        me: Any = self  # Celery sets these attributes in setup_defaults
        if not me.concurrency:
            me.concurrency = bucket.concurrency
        if me.prefetch_multiplier == me.app.conf.worker_prefetch_multiplier:
            me.prefetch_multiplier = bucket.prefetch
        if me.time_limit is None:
            me.time_limit = bucket.time_limit
        if me.soft_time_limit is None:
            me.soft_time_limit = bucket.soft_time_limit
