"""Message tasks with no ``@rate_limit`` of their own, for the bucket file's default rates
(tests/integration/test_bucket_rate_workers.py). Loaded by test workers with
``--include`` :data:`INCLUDE`.

Each run appends its start (the key the test expects it limited on, its id, the time)
to a Redis list, as tests/support/rate_tasks.py does for ``@rate_limit``.
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis

from config.settings import settings
from tasks.app import app
from tasks.base import MessageTask
from tests.support.recorder import recorder

INCLUDE = "tests.support.fault_tasks,tests.support.rate_tasks,tests.support.bucket_rate_tasks"


def starts_key() -> str:
    return f"{settings().key_prefix}:test:bucket-rated:runs"


def record(key: str, message: Any) -> None:
    recorder().rpush(starts_key(), json.dumps({"key": key, "id": message["id"],
                                               "t": time.time()}))


def read_starts(client: redis.Redis) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in client.lrange(starts_key(), 0, -1)]


@app.task(bind=True, base=MessageTask, name="tests.bucket_plain_work")
def bucket_plain_work(self: MessageTask, message: Any) -> None:
    """Limited by its bucket's default only (keyed on user_id)."""
    record(message["user_id"], message)


@app.task(bind=True, base=MessageTask, name="tests.bucket_account_work")
def bucket_account_work(self: MessageTask, message: Any) -> None:
    """Limited by its own ``[tasks."tests.bucket_account_work"]`` default (payload.account)."""
    record(message["payload"]["account"], message)
