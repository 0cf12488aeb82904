"""The base class of every recur message task."""

from __future__ import annotations

from typing import Any

from celery import Task

from config.settings import settings
from routing.messages import Message, validate_message


class MessageTask(Task):  # type: ignore[misc]
    """A task whose first argument is a message, routed to the message's bucket.

    The router validates the message before anything is published, so a bad
    message raises at ``apply_async``/``delay``. The worker validates again
    before running (a message can be published by other means); an invalid
    one fails at once and is dead-lettered with the reason.
    """

    abstract = True
    #: Read by routing.router.route_task.
    routes_by_message = True
    #: Retries (when a task opts into them) stop at the delivery budget.
    max_retries = settings().max_deliveries - 1

    def message(self, raw: Any) -> Message:
        """Validate the raw first argument on the worker side."""
        return validate_message(raw)

    @property
    def worker_name(self) -> str:
        """Node name of the worker running this task (empty outside a worker)."""
        return str(self.request.hostname or "")

    @property
    def redelivered(self) -> bool:
        """Whether the broker delivered this message before (e.g. its worker died)."""
        info = self.request.delivery_info or {}
        return bool(info.get("redelivered"))
