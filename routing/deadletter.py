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
from functools import partial
from typing import Any

from kombu import Connection, Producer

from config.buckets import Bucket
from config.errors import InvalidArgument
from routing.queues import TASK_EXCHANGE
from routing.routed import routed

#: Most dead messages (or set-aside rows) one ``recur dead list`` shows: each is read
#: from the queue and held unacknowledged until the listing ends.
MAX_LIST = 1000
#: Most characters of one field (id, task, reason, message) a listing shows of a dead
#: message: a 10 MB body or a 100 KB header is cut, with its length noted.
MAX_SHOWN = 2000

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
    """Why a message was dead-lettered, and from which queue (``due_jobs``: by recur).

    Headers come from whoever published the message: an ``x-death`` that is not a list
    of tables (a string, numbers, an empty list) reads as no ``x-death``, never an error.
    """
    if "x-recur-reason" in headers:  # a poison job the scheduler dead-lettered
        return shown(headers["x-recur-reason"]), "due_jobs"
    deaths = headers.get("x-death")
    first = deaths[0] if isinstance(deaths, list) and deaths else {}
    if not isinstance(first, dict):
        first = {}
    reason = first.get("reason") or headers.get("x-first-death-reason") or "unknown"
    return shown(reason), shown(first.get("queue") or headers.get("x-first-death-queue") or "")


def shown(value: Any, most: int = MAX_SHOWN) -> str:
    """``value`` as one printable line of at most ``most`` characters (and a note of how
    long it was): bytes decoded with escapes, control characters and lone surrogates
    escaped, so a hostile header or body cannot rewrite a terminal or flood it."""
    if isinstance(value, bytes | bytearray):
        text = bytes(value[:most * 4]).decode("utf-8", "backslashreplace")
        size = len(value)
    else:
        text, size = str(value), -1
    text = "".join(c if c.isprintable() and not 0xD800 <= ord(c) <= 0xDFFF
                   else c.encode("unicode_escape", "backslashreplace").decode("ascii")
                   for c in text[:most])
    size = size if size >= 0 else len(str(value))
    return text if len(text) < most and size <= most else f"{text[:most]}…({size} in all)"


def _args_of(raw: Any) -> Any:
    """The task's first argument (a recur message), or the body shown as text when the
    body is not a Celery JSON message or is too long to list."""
    body = raw.body
    if isinstance(body, bytes | bytearray | str) and len(body) <= MAX_SHOWN:
        try:
            parsed = json.loads(body)
            if isinstance(parsed, list) and parsed and len(json.dumps(parsed[0])) <= MAX_SHOWN:
                return parsed[0]
        except (ValueError, TypeError, RecursionError):  # RecursionError: [[[[…]]]]
            pass
    return shown(body)


def _describe(raw: Any, error_of: Callable[[str], str]) -> DeadMessage:
    headers = raw.headers if isinstance(raw.headers, dict) else {}
    reason, queue = reason_of(headers)
    task_id = headers.get("id")
    error = error_of(task_id) if isinstance(task_id, str) and task_id.isprintable() else ""
    return DeadMessage(task_id=shown(task_id or ""), task=shown(headers.get("task") or ""),
                       args=_args_of(raw), reason=reason, from_queue=queue,
                       error=shown(error))


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


def unreplayable(raw: Any, known_task: Callable[[str], bool]) -> str:
    """Why a worker could not run ``raw`` if it were replayed ("" when it could): such a
    message would only come straight back to the dead-letter queue, so it stays there."""
    headers = raw.headers if isinstance(raw.headers, dict) else {}
    task, task_id = headers.get("task"), headers.get("id")
    if not isinstance(task, str) or not task:
        return "no 'task' header: not a Celery task message"
    if not known_task(task):
        return f"task '{shown(task, 100)}' is no task of this app"
    if not isinstance(task_id, str) or not task_id:
        return "no 'id' header: not a Celery task message"
    if (kind := raw.properties.get("content_type")) != "application/json":
        return f"content type '{shown(kind, 100)}' is not JSON" if kind else "no content type"
    try:
        body = json.loads(raw.body)
    except (ValueError, TypeError, RecursionError):
        return "body is not UTF-8 JSON (or nested too deep)"
    if not (isinstance(body, list) and len(body) == 3 and isinstance(body[0], list)
            and isinstance(body[1], dict) and isinstance(body[2], dict)):
        return "body is not a Celery task message ([args, kwargs, embed])"
    return ""


def replay_dead(conn: Connection, bucket: Bucket, limit: int = 100,
                known_task: Callable[[str], bool] = lambda task: True,
                left: list[tuple[str, str]] | None = None) -> int:
    """Move up to ``limit`` dead messages back to the bucket's queue.

    Each is published (with confirms, mandatory: a bucket queue deleted or unbound is
    declared again, routing/routed.py) before it is removed from the dead queue,
    so a crash in between leaves a duplicate, never a loss. One a worker could not run
    (:func:`unreplayable`) is left where it is, in its place, and (its id, why) is
    appended to ``left``. Returns how many were moved.
    """
    moved = 0
    with conn.channel() as channel:
        producer = Producer(channel, exchange=TASK_EXCHANGE)
        for raw in peek(channel, bucket.dead_queue, limit):
            if why := unreplayable(raw, known_task):
                task_id = raw.headers.get("id") if isinstance(raw.headers, dict) else None
                if left is not None:
                    left.append((shown(task_id or "?", 200), why))
                continue  # unacknowledged: back in the dead queue when the channel closes
            headers = {k: v for k, v in (raw.headers or {}).items() if k not in BROKER_HEADERS}
            props = raw.properties
            routed(producer, partial(producer.publish, raw.body, routing_key=bucket.queue,
                                     headers=headers, content_type=props.get("content_type"),
                                     content_encoding=props.get("content_encoding"),
                                     correlation_id=props.get("correlation_id"),
                                     delivery_mode=2, retry=True, mandatory=True))
            channel.basic_ack(raw.delivery_tag)
            moved += 1
    return moved
