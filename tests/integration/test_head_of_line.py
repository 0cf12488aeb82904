"""Short work never waits behind long work: each bucket has its own queue and workers."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kombu import Connection

from config.settings import settings
from routing.broker import queue_depth
from tasks import completions
from tasks.process import process_message
from tests.support.processes import wait_for

pytestmark = pytest.mark.services

SHORT_BATCH = 20
LONG_SECONDS = 3.0  # long bucket's 5 s of simulated work times the scale below
SCALE = {"RECUR_WORK_SCALE": str(LONG_SECONDS / 5.0)}


def short_batch_latency(round_id: str, long_queued: int, redis_client: Any,
                        broker: Connection) -> float:
    """Queue ``long_queued`` long tasks, then a short batch; seconds until the batch is done."""
    for i in range(long_queued):
        process_message.delay({"id": f"{round_id}-long-{i}", "user_id": "u", "bucket": "long",
                               "payload": None})
    since = completions.last_id(redis_client, settings())
    start = time.monotonic()
    ids = {f"{round_id}-short-{i}" for i in range(SHORT_BATCH)}
    for mid in sorted(ids):
        process_message.delay({"id": mid, "user_id": "u", "bucket": "short", "payload": None})
    done: set[str] = set()

    def batch_done() -> bool:
        done.update(c.message_id for c in completions.read_since(redis_client, settings(), since)
                    if c.message_id in ids)
        return done == ids

    wait_for(batch_done, 60, f"short batch of round {round_id}", interval=0.05)
    elapsed = time.monotonic() - start
    # The long work is still queued: the short batch did not wait for it.
    assert queue_depth(broker, "long") >= long_queued - 2
    return elapsed


def test_short_tasks_do_not_wait_behind_long_ones(broker: Connection, start_worker: Any,
                                                  redis_client: Any) -> None:
    start_worker("long", concurrency=1, env=SCALE)
    start_worker("short", concurrency=2, env=SCALE)
    few = short_batch_latency("few", 3, redis_client, broker)
    many = short_batch_latency("many", 12, redis_client, broker)
    # Behind the long work the batch would need 3 x 3 s (few) and 12 x 3 s (many).
    assert few < 2 * LONG_SECONDS and many < 2 * LONG_SECONDS, (few, many)
    assert many < few + 2.0, f"short latency grew with the long backlog: {few:.2f}s -> {many:.2f}s"
