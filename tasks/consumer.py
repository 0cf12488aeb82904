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
from typing import Any

from celery.utils.log import get_logger
from celery.worker.consumer import Consumer

log: logging.Logger = get_logger(__name__)


#: Waits between reconnect attempts: the first, the step added per try, the longest.
RECONNECT_WAITS = {"interval_start": 0.5, "interval_step": 0.5, "interval_max": 2.0}


class DeadLetteringConsumer(Consumer):  # type: ignore[misc]
    """Celery's consumer, rejecting undecodable messages into the dead-letter queue."""

    def ensure_connected(self, conn: Any) -> Any:
        """Celery's reconnect loop, with waits of at most 2 s between tries."""
        ensure = conn.ensure_connection

        def quickly(*args: Any, **kwargs: Any) -> Any:
            return ensure(*args, **{**RECONNECT_WAITS, **kwargs})

        conn.ensure_connection = quickly
        return super().ensure_connected(conn)

    def on_decode_error(self, message: Any, exc: Exception) -> None:
        log.critical("cannot decode message (content type %r, headers %r): %s; "
                     "rejecting it to the dead-letter queue",
                     message.content_type, message.headers, exc)
        message.reject_log_error(log, self.connection_errors)
