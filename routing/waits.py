"""Short waits in the broker: a message that must reach its bucket queue in a few
seconds (a rate-limited job waiting for its slot, tasks/flow/wait.py) waits in
RabbitMQ, not in a worker and not in the due-jobs store.

Why not Celery's countdown: its native delayed delivery counts whole seconds (kombu
refuses a countdown under one) and hands the rest to the worker, which holds the
message until its eta; a held message keeps its place in the worker's prefetch window,
and on a quorum queue that window does not grow (per-consumer QoS), so a worker
holding a few such messages stops taking any other. Why not the store: a row costs a
write, a dispatch by the scheduler and the run's token check and finish.

How, as kombu.transport.native_delayed_delivery but in UNIT_MS steps: LEVELS queues
``recur.wait.<k>``, each with a message TTL of UNIT_MS x 2^k, dead-lettering into the
next level's exchange. A message carries its wait in units as one header per level
(``recur_wait_<k>``: that bit, 0 or 1) and its own routing key; each level's (headers)
exchange sends it into the level's queue on a 1 bit and on to the next level on a 0,
and level 0 hands it to ``recur.tasks`` with its routing key, so it arrives in its
bucket queue as if published there. A wait is rounded up to a unit: the message
arrives at its time or up to UNIT_MS after it, never before. The queues are of
RECUR_QUEUE_TYPE (quorum: replicated, dead-lettered at least once) and durable, the
messages persistent: a wait survives a worker crash, a Redis restart and a broker
restart. Cost: one publish, and one dead-lettering per 1 bit (at most LEVELS) inside
RabbitMQ.
"""

from __future__ import annotations

import math
from typing import Any

from config.settings import Settings

#: Levels of wait queues, and the step of a wait (ms): waits up to MAX_WAIT seconds.
LEVELS, UNIT_MS = 8, 25
MAX_WAIT = ((1 << LEVELS) - 1) * UNIT_MS / 1000.0
#: Where a message goes when its wait is over, with its own routing key (routing/queues.py
#: TASK_EXCHANGE; named here, as routing/queues.py imports this module).
TASKS_EXCHANGE = "recur.tasks"


def level_name(level: int) -> str:
    """Name of the exchange and the queue of wait level ``level``."""
    return f"recur.wait.{level}"


def bit_header(level: int) -> str:
    return f"recur_wait_{level}"


def wait_route(wait: float) -> tuple[str, dict[str, int]] | None:
    """``(exchange, headers)`` that deliver a message, published to that exchange with
    its own routing key and these headers, to its queue after ``wait`` seconds (rounded
    up to UNIT_MS); None when the wait is not between 0 and MAX_WAIT (publish it
    directly, or write it to the store)."""
    units = math.ceil(wait * 1000.0 / UNIT_MS)
    if not 0 < units < (1 << LEVELS):
        return None
    return level_name(LEVELS - 1), {bit_header(k): (units >> k) & 1 for k in range(LEVELS)}


def level_arguments(level: int, cfg: Settings) -> dict[str, Any]:
    """The arguments of wait queue ``level``: its TTL and where it dead-letters to."""
    args: dict[str, Any] = {
        "x-queue-type": cfg.queue_type,
        "x-overflow": "reject-publish",
        "x-message-ttl": UNIT_MS << level,
        "x-dead-letter-exchange": level_name(level - 1) if level > 0 else TASKS_EXCHANGE,
    }
    if cfg.queue_type == "quorum":
        args["x-dead-letter-strategy"] = "at-least-once"
    return args


def declare_waits(channel: Any, cfg: Settings) -> None:
    """Declare the wait levels (after ``recur.tasks``, which the last one feeds)."""
    for level in range(LEVELS):
        channel.exchange_declare(exchange=level_name(level), type="headers", durable=True,
                                 auto_delete=False)
    for level in range(LEVELS):
        name = level_name(level)
        channel.queue_declare(queue=name, durable=True, auto_delete=False,
                              arguments=level_arguments(level, cfg))
        channel.queue_bind(queue=name, exchange=name, routing_key="",
                           arguments={"x-match": "all", bit_header(level): 1})
        # A 0 bit skips this level: on to the next level's exchange, or to recur.tasks.
        channel.exchange_bind(destination=level_name(level - 1) if level > 0
                              else TASKS_EXCHANGE, source=name, routing_key="",
                              arguments={"x-match": "all", bit_header(level): 0})
