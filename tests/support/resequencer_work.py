"""Processing functions for the resequencer tests (RECUR_RESEQ_PROCESSOR).

``random_work`` sleeps 0-50 ms (seeded by the message id, so a redelivered
message takes as long again) and fails for good when the payload says so;
``{"sleep": s}`` sleeps that long instead. Every run is counted in Redis
(``attempts``), so a crash test can see that a message really ran twice.
"""

from __future__ import annotations

import random
import time
from typing import Any

from config.settings import settings
from routing.messages import Message
from tasks.redis_conn import get_redis


def attempts_key(message_id: str) -> str:
    return f"{settings().key_prefix}:test:reseq-attempts:{message_id}"


def random_work(message: Message) -> Any:
    get_redis().incr(attempts_key(message["id"]))
    payload = message["payload"] if isinstance(message["payload"], dict) else {}
    if payload.get("fail"):
        raise ValueError(f"processing {message['id']} always fails")
    seconds = payload.get("sleep", random.Random(message["id"]).uniform(0, 0.05))
    time.sleep(seconds)
    return {"processed": message["id"], "payload": message["payload"]}
