"""Message → bucket → queue: validation, the Celery router and the queue topology."""

from routing.messages import Message, validate_message
from routing.router import queue_for_message, route_task

__all__ = ["Message", "queue_for_message", "route_task", "validate_message"]
