"""Where a message goes and how it gets there: message → bucket → queue (messages,
router, queues, deadletter), the broker boundary (broker), the Redis boundary
(redis_client: the client, its error translator and the one Lua-script loader;
redis_check: Redis' settings checked at start) and the resequencer (reseq/)."""

from routing.messages import Message, validate_message
from routing.router import queue_for_message, route_task

__all__ = ["Message", "queue_for_message", "route_task", "validate_message"]
