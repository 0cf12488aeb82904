"""What the operator commands need from the broker and the result backend."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from amqp.exceptions import NotFound
from celery import Celery

from config.errors import BrokerUnavailable


@contextmanager
def broker_connection(app: Celery) -> Iterator[Any]:
    """A connected broker connection; an unreachable or refusing broker is one
    :class:`BrokerUnavailable` at once, not kombu's retries and traceback."""
    conn = app.connection_for_write()
    try:
        try:
            conn.ensure_connection(max_retries=1, interval_start=0, timeout=5)
        except Exception as exc:  # kombu re-raises its transport's error types
            raise BrokerUnavailable(f"broker {conn.as_uri()}: cannot connect: "
                                    f"{type(exc).__name__}: {exc}") from exc
        try:
            yield conn
        except NotFound as exc:
            raise BrokerUnavailable(f"broker {conn.as_uri()}: {exc.reply_text}: run "
                                    f"`recur topology` to declare the queues") from exc
        except (*conn.connection_errors, *conn.channel_errors) as exc:
            raise BrokerUnavailable(f"broker {conn.as_uri()}: {type(exc).__name__}: "
                                    f"{exc}") from exc
    finally:
        conn.release()


def stored_error(app: Celery, task_id: str) -> str:
    """A dead task's stored failure as ``ExceptionClass: message`` ("" when none).

    Read from the raw stored meta: Celery rebuilds an exception class it does not
    trust as a plain ``Exception`` wrapping the class name, which says nothing.
    """
    if not task_id:
        return ""
    backend = app.backend
    raw = backend.get(backend.get_key_for_task(task_id))
    if not raw:
        return ""
    meta = backend.decode(raw)
    if meta.get("status") != "FAILURE":
        return ""
    return exception_line(meta.get("result"))


def exception_line(result: Any) -> str:
    """``Class: message`` from Celery's serialised exception ({exc_type, exc_message})."""
    if not isinstance(result, dict) or "exc_type" not in result:
        return str(result or "")
    message = result.get("exc_message")
    if isinstance(message, list | tuple):
        message = " ".join(str(part) for part in message)
    return f"{result['exc_type']}: {message}" if message else str(result["exc_type"])
