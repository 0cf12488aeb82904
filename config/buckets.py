"""The bucket table: the only place duration buckets are defined.

A bucket is a class of work by execution time. Each has its own queue and its
own workers so short work never waits behind long work. Everything else
(routing, queue declarations, worker profiles, the demo) reads this table.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

Pool = Literal["prefork", "threads", "solo"]


@dataclass(frozen=True)
class Bucket:
    """One duration bucket and the worker profile that serves it."""

    name: str
    #: RabbitMQ queue the bucket's tasks are published to.
    queue: str
    #: Seconds before SoftTimeLimitExceeded is raised inside the task.
    soft_time_limit: float
    #: Seconds before the worker child running the task is killed.
    time_limit: float
    #: Messages reserved per worker process: long work keeps 1, so a busy
    #: process never sits on messages another process could run.
    prefetch: int
    #: Worker processes started by ``recur worker <bucket>``.
    concurrency: int
    pool: Pool
    #: Simulated I/O seconds of ``tasks.process_message`` for this bucket
    #: (multiplied by RECUR_WORK_SCALE).
    work_seconds: float

    @property
    def dead_queue(self) -> str:
        """Queue that receives this bucket's dead-lettered messages."""
        return f"{self.queue}.dead"


BUCKETS: tuple[Bucket, ...] = (
    Bucket("short", "short", soft_time_limit=30, time_limit=45, prefetch=4,
           concurrency=4, pool="prefork", work_seconds=0.05),
    Bucket("medium", "medium", soft_time_limit=120, time_limit=180, prefetch=2,
           concurrency=2, pool="prefork", work_seconds=0.5),
    Bucket("long", "long", soft_time_limit=900, time_limit=1200, prefetch=1,
           concurrency=2, pool="prefork", work_seconds=5.0),
)

BUCKETS_BY_NAME: MappingProxyType[str, Bucket] = MappingProxyType({b.name: b for b in BUCKETS})
BUCKETS_BY_QUEUE: MappingProxyType[str, Bucket] = MappingProxyType({b.queue: b for b in BUCKETS})

#: Default message kinds and the bucket each runs in; RECUR_KINDS adds or overrides.
DEFAULT_KINDS: MappingProxyType[str, str] = MappingProxyType({
    "ping": "short",
    "notify": "short",
    "sync": "medium",
    "crawl": "medium",
    "report": "long",
    "export": "long",
})
