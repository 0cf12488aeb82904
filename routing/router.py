"""Celery router: every message task goes to its message's bucket queue.

Plugged into ``task_routes``. Celery calls it before anything is published,
so a message that is invalid or names an unknown bucket raises here and
nothing reaches the broker.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from config.buckets_in_use import bucket_table
from config.errors import InvalidMessage
from routing.messages import validate_message

#: Attribute a task sets to say "my first argument is a message: route by it".
ROUTES_BY_MESSAGE = "routes_by_message"


def queue_for_message(message: Any) -> str:
    """The queue a message's task is published to (pure; validates the message)."""
    return bucket_table().get(validate_message(message)["bucket"]).queue


def route_task(name: str, args: Sequence[Any] | None, kwargs: Mapping[str, Any] | None,
               options: Mapping[str, Any], task: Any = None, **_: Any) -> dict[str, str] | None:
    """Celery router: ``{'queue': <bucket queue>}`` for message tasks, else no opinion."""
    if task is None:  # send_task by name: look the task up, so it is validated too
        from celery import current_app  # here: `recur status` imports routing, not Celery

        task = current_app.tasks.get(name)
    if task is None or not getattr(task, ROUTES_BY_MESSAGE, False):
        return None
    if args:
        message = args[0]
    elif kwargs and "message" in kwargs:
        message = kwargs["message"]
    else:
        raise InvalidMessage("message", f"{name} needs a message as its first argument")
    return {"queue": queue_for_message(message)}
