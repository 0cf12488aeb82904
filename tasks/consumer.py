"""The worker's consumer: an undecodable message is dead-lettered, not dropped.

Celery acknowledges (drops) a message whose body it cannot decode, so it does not
loop. Rejecting it without requeue stops the loop just as well and the broker
moves it to the bucket's dead-letter queue, where it can be inspected.
Disallowed content (pickle) and unknown tasks are already rejected by Celery.
"""

from __future__ import annotations

import logging
from typing import Any

from celery.utils.log import get_logger
from celery.worker.consumer import Consumer

log: logging.Logger = get_logger(__name__)


class DeadLetteringConsumer(Consumer):  # type: ignore[misc]
    """Celery's consumer, rejecting undecodable messages into the dead-letter queue."""

    def on_decode_error(self, message: Any, exc: Exception) -> None:
        log.critical("cannot decode message (content type %r, headers %r): %s; "
                     "rejecting it to the dead-letter queue",
                     message.content_type, message.headers, exc)
        message.reject_log_error(log, self.connection_errors)
