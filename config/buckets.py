"""The bucket table: duration buckets, their worker profiles and the message kinds.

A bucket is a class of work by execution time. Each has its own queue and its
own workers so short work never waits behind long work. The table in use is
:func:`config.buckets_in_use.bucket_table`: the built-in one below, or the TOML
file a user owns (``RECUR_BUCKETS_FILE``, see :mod:`config.bucketfile`).
Everything else (routing, queue declarations, worker profiles, the scheduler,
status, the seed job, the demo) reads the table through that one accessor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Literal

from config.bucket_rates import RateDefault

Pool = Literal["prefork", "threads", "solo"]
POOLS: tuple[str, ...] = ("prefork", "threads", "solo")


@dataclass(frozen=True)
class Bucket:
    """One duration bucket and the worker profile that serves it."""

    name: str
    #: RabbitMQ queue the bucket's tasks are published to.
    queue: str
    #: Seconds before SoftTimeLimitExceeded is raised inside the task (an async
    #: task is cancelled instead, see tasks/aio.py).
    soft_time_limit: float
    #: Seconds before the worker child running the task is killed (an async
    #: task fails with TimeLimitExceeded).
    time_limit: float
    #: Messages reserved per worker process: long work keeps 1, so a busy
    #: process never sits on messages another process could run.
    prefetch: int
    #: Worker processes (prefork) or threads (threads) of ``recur worker <bucket>``.
    concurrency: int
    pool: Pool
    #: Simulated I/O seconds of ``tasks.process_message`` for this bucket
    #: (multiplied by RECUR_WORK_SCALE).
    work_seconds: float = 0.0
    #: Default jitter of the bucket's recurring messages: a fraction 0..1 of their
    #: interval (routing/jitter.py); 0 keeps "every seconds after the run".
    jitter: float = 0.0
    #: Default rate limit of the bucket's jobs (config/bucket_rates.py); None: none.
    rate: RateDefault | None = None

    @property
    def dead_queue(self) -> str:
        """Queue that receives this bucket's dead-lettered messages."""
        return f"{self.queue}.dead"


@dataclass(frozen=True)
class BucketTable:
    """The buckets in table order and the kinds that map to them."""

    buckets: tuple[Bucket, ...]
    kinds: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    #: Where the table came from: a file path, or "built-in".
    source: str = "built-in"
    #: Tasks' own default rate limits, by task name (``[tasks."<name>"]``).
    task_rates: Mapping[str, RateDefault] = field(default_factory=lambda: MappingProxyType({}))

    # Cached (the table is frozen): every message looks its bucket up, and building the
    # mapping per lookup was ~2 % of a bulk enqueue's CPU.
    @cached_property
    def by_name(self) -> Mapping[str, Bucket]:
        return MappingProxyType({b.name: b for b in self.buckets})

    @cached_property
    def by_queue(self) -> Mapping[str, Bucket]:
        return MappingProxyType({b.queue: b for b in self.buckets})

    @cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(b.name for b in self.buckets)

    def get(self, name: str) -> Bucket:
        """The bucket called ``name`` (KeyError naming the known ones)."""
        try:
            return self.by_name[name]
        except KeyError:
            raise KeyError(f"unknown bucket {name!r} (known: {', '.join(self.names)})") from None


BUILTIN = BucketTable(
    buckets=(
        Bucket("short", "short", soft_time_limit=30, time_limit=45, prefetch=4,
               concurrency=4, pool="prefork", work_seconds=0.05),
        Bucket("medium", "medium", soft_time_limit=120, time_limit=180, prefetch=2,
               concurrency=2, pool="prefork", work_seconds=0.5),
        Bucket("long", "long", soft_time_limit=900, time_limit=1200, prefetch=1,
               concurrency=2, pool="prefork", work_seconds=5.0),
        # I/O-bound work: one process, hundreds of tasks at once. Async tasks run
        # on the process's event loop (tasks/aio.py); each waits on a pool thread,
        # which costs a thread stack, not a process (docs/tasks.md).
        Bucket("io", "io", soft_time_limit=30, time_limit=45, prefetch=1,
               concurrency=200, pool="threads", work_seconds=0.1),
    ),
    kinds=MappingProxyType({
        "ping": "short",
        "notify": "short",
        "sync": "medium",
        "crawl": "medium",
        "report": "long",
        "export": "long",
        "fetch": "io",
    }),
)

#: Default message kinds of the built-in table; RECUR_KINDS adds or overrides.
DEFAULT_KINDS: Mapping[str, str] = BUILTIN.kinds
