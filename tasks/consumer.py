"""The worker's consumer: an undecodable message is dead-lettered, not dropped.

Celery acknowledges (drops) a message whose body it cannot decode, so it does not
loop. Rejecting it without requeue stops the loop just as well and the broker
moves it to the bucket's dead-letter queue, where it can be inspected.
Disallowed content (pickle) and unknown tasks are already rejected by Celery.

It also reconnects to a broker that is back within about two seconds: kombu's
default waits grow by 2 s per try (2, 4, 6 … 30 s), so a worker found a broker
restarted after a 7 s outage only 5 s later.
"""

from __future__ import annotations

import logging
import math
import sys
from typing import Any

from celery.utils.log import get_logger
from celery.worker.consumer import Consumer

from config.errors import EXIT_ERROR, one_line
from routing.broker import topology_conflict, topology_refused
from routing.messages import MAX_PAYLOAD_DEPTH, too_deep

log: logging.Logger = get_logger(__name__)


#: What Celery's request raises for a body or header of the wrong shape (the message's
#: fault, never the worker's: pool and connection errors are of other types).
MALFORMED = (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError,
             RecursionError)  # nested too deeply to hand to the pool


def _header(message: Any, name: str) -> Any:
    headers = getattr(message, "headers", None)
    return headers.get(name) if isinstance(headers, dict) else None


def shape_problem(message: Any) -> str | None:
    """Why a Celery (protocol 2) body is not ``[args, kwargs, embed]`` of the right types,
    or None. The body is decoded once (kombu keeps it for the request): a kwargs that is
    not a mapping would fail in the pool, outside the task, and be acknowledged unseen."""
    headers = getattr(message, "headers", None)
    if not isinstance(headers, dict) or "task" not in headers:
        return None  # protocol 1 or no task: Celery's own handling
    problem = header_problem(headers)
    if problem is not None:
        return problem
    try:
        body = message.decode()
    except Exception:  # Celery's decode-error path (on_decode_error) takes it
        return None
    if not isinstance(body, list | tuple) or len(body) != 3:
        return f"the body must be [args, kwargs, embed], got {type(body).__name__}"
    args, kwargs, embed = body
    for name, value, kinds in (("args", args, (list, tuple)), ("kwargs", kwargs, (dict,)),
                               ("embed", embed, (dict, type(None)))):
        if not isinstance(value, kinds):
            return f"the body's {name} must be a {kinds[0].__name__}, got {type(value).__name__}"
    # A message's payload nests at most MAX_PAYLOAD_DEPTH levels (routing/messages.py), a few
    # more in the body: far deeper fails to pickle for the pool, or to unpickle in a child
    # (which dies, and the message comes back), depending on the stack left at that point.
    if _brackets(message) > BODY_DEPTH and (too_deep(args, BODY_DEPTH)
                                            or too_deep(kwargs, BODY_DEPTH)):
        return f"the body nests more than {BODY_DEPTH} levels deep"
    return None


#: Celery's headers that name a task or message: a string, or absent.
ID_HEADERS = ("task", "id", "root_id", "parent_id", "group", "shadow")


def header_problem(headers: dict[str, Any]) -> str | None:
    """Which Celery header has a type Celery does not check, or None. A ``timelimit`` of
    strings reaches the pool's timer in the main process and stops the whole worker
    ("Unrecoverable error"); a ``retries`` or id of the wrong type fails the task or its
    result later, far from the header. (``eta``/``expires`` Celery refuses itself.)"""
    for name in ID_HEADERS:
        value = headers.get(name)
        if value is not None and not isinstance(value, str):
            return f"header {name}: must be a string, got {type(value).__name__}"
    retries = headers.get("retries")
    if retries is not None and not (_whole(retries) and retries >= 0):
        return f"header retries: must be a whole number >= 0, got {retries!r:.40}"
    limits = headers.get("timelimit")
    if limits is None:
        return None
    if (not isinstance(limits, list | tuple) or len(limits) != 2
            or not all(limit is None or _seconds(limit) for limit in limits)):
        return (f"header timelimit: must be [hard, soft] seconds (each a finite number >= 0 "
                f"or null), got {limits!r:.60}")
    return None


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _seconds(value: Any) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value) and value >= 0)


#: Deepest nesting of a body's args or kwargs (a message's payload limit and its envelope).
BODY_DEPTH = MAX_PAYLOAD_DEPTH + 10


def _brackets(message: Any) -> int:
    """Opening brackets in the raw body: an upper bound of its nesting, cheap to count."""
    raw = getattr(message, "body", b"")
    if isinstance(raw, str):
        return raw.count("[") + raw.count("{")
    if isinstance(raw, bytes | bytearray | memoryview):
        data = bytes(raw)
        return data.count(b"[") + data.count(b"{")
    return BODY_DEPTH + 1  # unknown: walk it


#: Waits between reconnect attempts: the first, the step added per try, the longest.
RECONNECT_WAITS = {"interval_start": 0.5, "interval_step": 0.5, "interval_max": 2.0}


class DeadLetteringConsumer(Consumer):  # type: ignore[misc]
    """Celery's consumer, rejecting undecodable messages into the dead-letter queue."""

    def start(self) -> Any:
        """Celery's consume loop; a declare the broker refuses (a queue of Celery's own past
        the virtual host's max-queues, a queue someone else declared otherwise meanwhile)
        ends the worker with one line (exit 2), not Celery's "Unrecoverable error" and
        traceback: declaring again cannot help."""
        try:
            return super().start()
        except Exception as exc:
            conflict = topology_conflict(exc)
            if conflict is None:
                raise
            # the process's own stderr: Celery logs what is printed to sys.stderr by now
            print(f"recur: {one_line(topology_refused(self.app.conf.broker_url, conflict))}",
                  file=sys.__stderr__, flush=True)
            raise SystemExit(EXIT_ERROR) from exc

    def ensure_connected(self, conn: Any) -> Any:
        """Celery's reconnect loop, with waits of at most 2 s between tries."""
        ensure = conn.ensure_connection

        def quickly(*args: Any, **kwargs: Any) -> Any:
            return ensure(*args, **{**RECONNECT_WAITS, **kwargs})

        conn.ensure_connection = quickly
        return super().ensure_connected(conn)

    def create_task_handler(self, *args: Any, **kwargs: Any) -> Any:
        """Celery's handler, dead-lettering a message whose body or headers have the wrong
        shape (a JSON string where Celery expects ``[args, kwargs, embed]``, a header of the
        wrong type): Celery lets such an error out of its handler, and it stops the whole
        worker, then every worker the message is delivered to next."""
        handle = super().create_task_handler(*args, **kwargs)

        def on_task_received(message: Any) -> Any:
            problem = shape_problem(message)
            if problem is None:
                try:
                    return handle(message)
                except MALFORMED as exc:
                    if getattr(message, "acknowledged", False):
                        raise  # already settled: not this message's shape
                    problem = f"{type(exc).__name__}: {exc}"
            log.critical("malformed task message (task %r, id %r): %s; rejecting it to the "
                         "dead-letter queue", _header(message, "task"), _header(message, "id"),
                         problem)
            message.reject_log_error(log, self.connection_errors)
            return None

        return on_task_received

    def on_decode_error(self, message: Any, exc: Exception) -> None:
        log.critical("cannot decode message (content type %r, headers %r): %s; "
                     "rejecting it to the dead-letter queue",
                     message.content_type, message.headers, exc)
        message.reject_log_error(log, self.connection_errors)
