"""What the operator commands need from the broker and the result backend."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from celery import Celery
from kombu import Connection

from routing.broker import operator_session


def broker_connection(app: Celery) -> AbstractContextManager[Connection]:
    """The app's broker connection, connected (routing/broker.py: an unreachable or
    refusing broker is one :class:`BrokerUnavailable` at once, not kombu's retries)."""
    return operator_session(app.connection_for_write())


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
