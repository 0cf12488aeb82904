"""Queue topology, declared from the bucket table.

Per bucket: a durable queue (quorum where the broker supports it) bound to the
``recur.tasks`` topic exchange, dead-lettering into ``recur.dead`` where the
bucket's ``<queue>.dead`` queue collects what failed for good. The delivery
limit makes the broker dead-letter a message that keeps crashing its worker.
Topic (not direct) exchanges let Celery's native delayed delivery reach the
queues for short countdowns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from kombu import Connection, Exchange, Queue
from kombu.transport.native_delayed_delivery import (
    bind_queue_to_native_delayed_delivery_exchange as bind_delayed,
)
from kombu.transport.native_delayed_delivery import (
    declare_native_delayed_delivery_exchanges_and_queues as declare_delayed,
)

from config.buckets import Bucket
from config.buckets_in_use import bucket_table
from config.settings import Settings
from routing.broker import BROKER_ERRORS, QueueStats, close_channel
from routing.waits import declare_waits

TASK_EXCHANGE = Exchange("recur.tasks", type="topic", durable=True)
DEAD_EXCHANGE = Exchange("recur.dead", type="topic", durable=True)


def queue_arguments(bucket: Bucket, cfg: Settings) -> dict[str, Any]:
    """Arguments of a bucket's work queue."""
    args: dict[str, Any] = {
        "x-queue-type": cfg.queue_type,
        "x-dead-letter-exchange": DEAD_EXCHANGE.name,
        "x-dead-letter-routing-key": bucket.dead_queue,
    }
    if cfg.queue_type == "quorum":
        # A message returned this many times (crash, lost worker) is dead-lettered
        # instead of being delivered again: at most max_deliveries deliveries.
        args["x-delivery-limit"] = cfg.max_deliveries - 1
    return args


def work_queue(bucket: Bucket, cfg: Settings) -> Queue:
    """The bucket's work queue."""
    return Queue(bucket.queue, TASK_EXCHANGE, routing_key=bucket.queue, durable=True,
                 queue_arguments=queue_arguments(bucket, cfg))


def dead_queue(bucket: Bucket, cfg: Settings) -> Queue:
    """The bucket's dead-letter queue."""
    return Queue(bucket.dead_queue, DEAD_EXCHANGE, routing_key=bucket.dead_queue,
                 durable=True, queue_arguments={"x-queue-type": cfg.queue_type})


#: The resequencer's outbound sends: not a duration bucket (not in the bucket table),
#: but a queue with its own DLQ and the profile ``recur worker outbound`` runs: threads,
#: as sends wait on I/O (the threads pool ignores time limits; a sender run hands its
#: turn back after 10 s by itself).
OUTBOUND = Bucket("outbound", "outbound", soft_time_limit=300, time_limit=360, prefetch=1,
                  concurrency=8, pool="threads", work_seconds=0)


def work_queues(cfg: Settings) -> list[Queue]:
    """Every bucket's work queue, in bucket-table order, then the outbound queue."""
    return [work_queue(b, cfg) for b in (*cfg.buckets.buckets, OUTBOUND)]


def declare_topology(connection: Connection, cfg: Settings) -> list[str]:
    """Declare exchanges and every work and dead-letter queue, and the short-wait levels
    (routing/waits.py); return the work and dead-letter queue names."""
    names = []
    with connection.channel() as channel:
        for bucket in (*cfg.buckets.buckets, OUTBOUND):
            for queue in (work_queue(bucket, cfg), dead_queue(bucket, cfg)):
                queue.bind(channel).declare()
                names.append(queue.name)
        TASK_EXCHANGE.bind(channel).declare()
        declare_waits(channel, cfg)  # short waits of rate-limited jobs, into recur.tasks
    if cfg.queue_type == "quorum":
        # Celery publishes a short countdown on quorum queues through its native delayed
        # delivery: without these exchanges (a worker declares them for its own queues
        # only) the publish fails, or the message is unroutable and dropped.
        declare_delayed(connection, "quorum")
        for queue in work_queues(cfg):
            bind_delayed(connection, queue)
    return names


def declare_again(open_channel: Callable[[], Any], names: Iterable[str],
                  cfg: Settings, extra: Iterable[Queue] = ()) -> list[str]:
    """Declare again those of ``names`` that are recur's queues (or of ``extra``, e.g. a
    destination's dead-letter queue), with their binding (and Celery's delayed-delivery
    one), each on a channel of its own: a queue whose binding was removed, or that was
    deleted and declared again by someone else, takes publishes again.
    What was done, one phrase a queue (a refusal, e.g. 406 for other arguments, named)."""
    queues = {q.name: q for b in (*cfg.buckets.buckets, OUTBOUND)
              for q in (work_queue(b, cfg), dead_queue(b, cfg))}
    queues.update((q.name, q) for q in extra)
    said = []
    for name in sorted(set(names) & queues.keys()):
        channel = open_channel()
        try:
            queue = queues[name].bind(channel)
            queue.declare()
            if cfg.queue_type == "quorum" and queue.exchange.name == TASK_EXCHANGE.name:
                queue.bind_to(TASK_EXCHANGE.name, routing_key=f"#.{queue.routing_key}")
            said.append(f"queue {name} declared and bound again")
        except BROKER_ERRORS as exc:  # the broker closes the channel over a refusal
            said.append(f"queue {name} cannot be declared again: "
                        f"{getattr(exc, 'reply_text', exc)}")
        finally:
            close_channel(channel)
    return said


def all_queue_names() -> list[str]:
    """Every work and dead-letter queue recur declares, in bucket-table order."""
    return [name for b in (*bucket_table().buckets, OUTBOUND) for name in (b.queue, b.dead_queue)]


def missing_queues_line(found: dict[str, QueueStats | None]) -> str | None:
    """One readable line naming the queues that do not exist yet (None: all do)."""
    missing = [name for name, stats in found.items() if stats is None]
    if not missing:
        return None
    return (f"queues not declared yet: {', '.join(missing)} (run `recur topology`, or start "
            f"a worker or the scheduler, which declare them)")
