"""Inspect and replay a bucket's dead-letter queue.

A message reaches ``<bucket>.dead`` when its task failed for good (rejected:
an error that is not retried, retries exhausted, a hard time limit) or when
it was delivered ``max_deliveries`` times without finishing (its worker kept
dying: ``delivery_limit``), or when the scheduler found its due-jobs row's
lease expired ``max_deliveries`` times (header ``x-recur-reason``). The
broker's ``x-death`` header says which; the
task's exception, when it raised one, is in the result backend under its id.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kombu import Connection, Producer

from config.buckets import Bucket
from config.errors import InvalidArgument
from routing.queues import TASK_EXCHANGE

#: Most dead messages (or set-aside rows) one ``recur dead list`` shows: each is read
#: from the queue and held unacknowledged until the listing ends.
MAX_LIST = 1000

#: Headers dropped when a message is replayed: the broker's dead-lettering ones, and a
#: locked job's number and submission time (tasks/distlock), so a replay takes a new
#: place in its user's line instead of being refused as a job that already ran.
BROKER_HEADERS = ("x-death", "x-first-death-exchange", "x-first-death-queue",
                  "x-first-death-reason", "x-delivery-count", "x-last-death-reason",
                  "x-last-death-queue", "x-last-death-exchange", "recur_lock_seq",
                  "recur_lock_since")


@dataclass(frozen=True)
class DeadMessage:
    """One dead-lettered task message, as an operator wants to see it."""

    task_id: str
    task: str
    args: Any
    reason: str
    from_queue: str
    error: str


def reason_of(headers: dict[str, Any]) -> tuple[str, str]:
    """Why a message was dead-lettered, and from which queue (``due_jobs``: by recur)."""
    if "x-recur-reason" in headers:  # a poison job the scheduler dead-lettered
        return str(headers["x-recur-reason"]), "due_jobs"
    deaths = headers.get("x-death") or [{}]
    first = deaths[0]
    reason = str(first.get("reason") or headers.get("x-first-death-reason") or "unknown")
    return reason, str(first.get("queue") or headers.get("x-first-death-queue") or "")


def _describe(raw: Any, error_of: Callable[[str], str]) -> DeadMessage:
    headers = dict(raw.headers or {})
    reason, queue = reason_of(headers)
    task_id = str(headers.get("id", ""))
    try:
        args = json.loads(raw.body)[0]
    except (ValueError, TypeError, IndexError, KeyError):
        args = raw.body
    return DeadMessage(task_id=task_id, task=str(headers.get("task", "")), args=args,
                       reason=reason, from_queue=queue, error=error_of(task_id))


def check_limit(limit: int) -> int:
    """``limit`` if it is 1..MAX_LIST; else :class:`InvalidArgument`."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIST:
        raise InvalidArgument(f"--limit must be 1..{MAX_LIST}, got {limit!r}")
    return limit


def peek(channel: Any, queue: str, limit: int) -> Iterator[Any]:
    """Up to ``limit`` messages of ``queue``, oldest first, got unacknowledged: closing
    ``channel`` without acking returns every one, in order."""
    for _ in range(limit):
        raw = channel.basic_get(queue, no_ack=False)
        if raw is None:
            return
        yield raw


def list_dead(conn: Connection, bucket: Bucket, error_of: Callable[[str], str],
              limit: int = 100) -> list[DeadMessage]:
    """Up to ``limit`` (1..MAX_LIST) dead messages of ``bucket``, oldest first, left in
    the queue."""
    check_limit(limit)
    with conn.channel() as channel:
        return [_describe(raw, error_of) for raw in peek(channel, bucket.dead_queue, limit)]


def replay_dead(conn: Connection, bucket: Bucket, limit: int = 100) -> int:
    """Move up to ``limit`` dead messages back to the bucket's queue; return how many.

    Each is published (with confirms) before it is removed from the dead queue,
    so a crash in between leaves a duplicate, never a loss.
    """
    moved = 0
    with conn.channel() as channel:
        producer = Producer(channel, exchange=TASK_EXCHANGE)
        for raw in peek(channel, bucket.dead_queue, limit):
            headers = {k: v for k, v in (raw.headers or {}).items() if k not in BROKER_HEADERS}
            props = raw.properties
            producer.publish(raw.body, routing_key=bucket.queue, headers=headers,
                             content_type=props.get("content_type"),
                             content_encoding=props.get("content_encoding"),
                             correlation_id=props.get("correlation_id"),
                             delivery_mode=2, retry=True)
            channel.basic_ack(raw.delivery_tag)
            moved += 1
    return moved
