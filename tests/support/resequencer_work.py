"""Processing steps for the resequencer tests: tasks named in RECUR_RESEQ_STEPS or
passed to submit(step=...), imported by the workers with RECUR_IMPORTS.

``random_work`` sleeps 0-50 ms (seeded by the message id, so a redelivered
message takes as long again) and fails for good when the payload says so;
``{"sleep": s}`` sleeps that long instead; ``{"fail_while": name}`` fails while the
Redis flag ``fail_flag(name)`` exists (a bug fixed later). Every run is counted in Redis
(``attempts``), so a crash test can see that a message really ran twice.
``async_work`` is an ``async def`` step that says which loop thread ran it.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from typing import Any

from config.settings import settings
from routing.messages import Message
from routing.redis_client import get_redis
from tasks.app import app
from tasks.reseq_steps import reseq_step

STEP = "tests.reseq_random_work"
ASYNC_STEP = "tests.reseq_async_work"


def attempts_key(message_id: str) -> str:
    return f"{settings().key_prefix}:test:reseq-attempts:{message_id}"


def fail_flag(name: str) -> str:
    return f"{settings().key_prefix}:test:reseq-fail:{name}"


@app.task(name=STEP)
def random_work(message: Message) -> Any:
    get_redis().incr(attempts_key(message["id"]))
    payload = message["payload"] if isinstance(message["payload"], dict) else {}
    if payload.get("fail"):
        raise ValueError(f"processing {message['id']} always fails")
    if payload.get("fail_while") and get_redis().exists(fail_flag(payload["fail_while"])):
        raise ValueError(f"processing {message['id']} fails while {payload['fail_while']}")
    seconds = payload.get("sleep", random.Random(message["id"]).uniform(0, 0.05))
    time.sleep(seconds)
    return {"processed": message["id"], "payload": message["payload"]}


@reseq_step  # given per call (submit(step=...)) for destinations whose own step differs
@app.task(name=ASYNC_STEP)
async def async_work(message: Message) -> Any:
    await asyncio.sleep(random.Random(message["id"]).uniform(0, 0.05))
    return {"processed": message["id"], "thread": threading.current_thread().name}
