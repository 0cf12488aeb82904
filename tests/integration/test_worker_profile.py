"""Workers take their bucket's profile, refuse pickle, and dead-letter what they cannot read."""

from __future__ import annotations

import json
import os
import pickle
import socket
import uuid
from pathlib import Path
from typing import Any

import pytest
from kombu import Connection, Producer

from config.buckets_in_use import BUCKETS_BY_NAME
from routing.broker import queue_depth
from routing.queues import TASK_EXCHANGE
from tests.support import services
from tests.support.processes import recur_argv, spawn, wait_for, wait_for_worker

pytestmark = pytest.mark.services


def stats_of(celery_app: Any, node: str) -> dict[str, Any]:
    replies = celery_app.control.inspect(destination=[node], timeout=5).stats() or {}
    stats: dict[str, Any] = replies[node]
    return stats


@pytest.mark.parametrize("bucket", ["short", "long"])
def test_recur_worker_runs_the_bucket_profile(celery_app: Any, tmp_logs: Path,
                                              bucket: str) -> None:
    profile = BUCKETS_BY_NAME[bucket]
    node = f"{bucket}@{socket.gethostname()}"
    child = spawn(f"recur-worker-{bucket}", recur_argv("worker", bucket, "--without-mingle"),
                  tmp_logs, {**os.environ, **services.test_environment()},
                  cwd=services.ROOT)
    try:
        wait_for_worker(celery_app, child, node)
        stats = stats_of(celery_app, node)
        assert stats["pool"]["max-concurrency"] == profile.concurrency
        assert stats["prefetch_count"] == profile.prefetch * profile.concurrency
        assert stats["pool"]["timeouts"] == [profile.soft_time_limit, profile.time_limit]
    finally:
        child.stop()


def test_plain_celery_worker_on_one_bucket_queue_gets_its_profile(
        celery_app: Any, start_worker: Any) -> None:
    # start_worker passes -c 2 explicitly: the long bucket's prefetch and limits still apply.
    _, node = start_worker("long")
    stats = stats_of(celery_app, node)
    long = BUCKETS_BY_NAME["long"]
    assert stats["prefetch_count"] == long.prefetch * 2
    assert stats["pool"]["timeouts"] == [long.soft_time_limit, long.time_limit]


def publish_raw(conn: Connection, body: bytes, content_type: str) -> None:
    headers = {"id": str(uuid.uuid4()), "task": "tasks.process_message", "lang": "py",
               "argsrepr": "", "kwargsrepr": "", "origin": "test"}
    Producer(conn.channel(), exchange=TASK_EXCHANGE).publish(
        body, routing_key="short", headers=headers, content_type=content_type,
        content_encoding="binary" if content_type.endswith("pickle") else "utf-8")


@pytest.mark.parametrize(("body", "content_type"), [
    (pickle.dumps(([{"id": "p", "user_id": "u", "bucket": "short", "payload": None}], {}, {})),
     "application/x-python-serialize"),
    (b"{not json", "application/json"),
])
def test_pickle_and_garbage_are_refused_into_the_dead_letter_queue(
        broker: Connection, start_worker: Any, body: bytes, content_type: str) -> None:
    start_worker("short")
    publish_raw(broker, body, content_type)
    wait_for(lambda: queue_depth(broker, "short.dead") == 1, 30,
             "the refused message to reach short.dead")
    assert queue_depth(broker, "short") == 0


GOOD = {"id": "g", "user_id": "u", "bucket": "short", "payload": None}


def nested_list(depth: int) -> Any:
    value: Any = None
    for _ in range(depth):
        value = [value]
    return value


#: Bodies of the wrong shape: before, the first two stopped the whole worker (Celery lets
#: the request's error out of its handler), the third was acknowledged unseen in the pool,
#: the last stopped the worker handing it to the pool (pickle's recursion).
MALFORMED_BODIES = [
    json.dumps("just a string"),
    json.dumps([[GOOD], {}]),
    json.dumps([[GOOD], [1], {}]),
    json.dumps([[GOOD], {}, "embed"]),
    json.dumps([[{**GOOD, "payload": nested_list(600)}], {}, {}]),
]


def test_a_body_of_the_wrong_shape_is_dead_lettered_and_the_worker_goes_on(
        broker: Connection, start_worker: Any) -> None:
    from tasks.process import process_message

    child, _ = start_worker("short")
    for count, body in enumerate(MALFORMED_BODIES, start=1):
        publish_raw(broker, body.encode(), "application/json")
        wait_for(lambda n=count: queue_depth(broker, "short.dead") == n, 30,  # type: ignore[misc]
                 f"malformed body {count} to reach short.dead")
        assert child.proc.poll() is None, "the worker stopped"
        good = process_message.apply_async(({**GOOD, "id": f"g{count}"},))
        good.get(timeout=30)  # the next good message ran (raises if it failed or never ran)
    assert queue_depth(broker, "short") == 0
