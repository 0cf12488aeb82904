"""Crashes and failures: nothing is lost, and what keeps failing ends in <bucket>.dead."""

from __future__ import annotations

from typing import Any

import pytest
from kombu import Connection

from config.buckets_in_use import BUCKETS_BY_NAME
from config.settings import settings
from routing.broker import queue_depth
from routing.deadletter import DeadMessage, list_dead, replay_dead
from tasks import completions
from tasks.process import process_message
from tests.support import fault_tasks
from tests.support.processes import wait_for

pytestmark = pytest.mark.services


def msg(mid: str, bucket: str = "short") -> dict[str, Any]:
    return {"id": mid, "user_id": "u-1", "bucket": bucket, "payload": {"x": 1}}


def attempts(redis_client: Any, mid: str) -> int:
    return int(redis_client.get(fault_tasks.attempts_key(mid)) or 0)


def dead_letters(celery_app: Any, conn: Connection, bucket: str) -> list[DeadMessage]:
    def error_of(task_id: str) -> str:
        result = celery_app.AsyncResult(task_id)
        return repr(result.result) if result.state == "FAILURE" else ""

    return list_dead(conn, BUCKETS_BY_NAME[bucket], error_of)


def test_worker_killed_mid_task_the_task_is_delivered_again(
        broker: Connection, celery_app: Any, start_worker: Any, redis_client: Any) -> None:
    scale = {"RECUR_WORK_SCALE": "0.6"}  # a long task works 3 s
    first, node = start_worker("long", concurrency=1, env=scale)
    since = completions.last_id(redis_client, settings())
    result = process_message.delay(msg("crash-me", "long"))

    def running() -> bool:
        active = celery_app.control.inspect(destination=[node], timeout=1).active() or {}
        return any(t["id"] == result.id for t in active.get(node, []))

    wait_for(running, 30, "the long task to start on the first worker")
    first.kill9()
    assert first.proc.returncode == -9
    _, second = start_worker("long", concurrency=1, env=scale)
    done: list[completions.Completion] = []

    def completed() -> bool:
        done.extend(c for c in completions.read_since(redis_client, settings(), since)
                    if c.message_id == "crash-me")
        return bool(done)

    wait_for(completed, 60, "the killed task to complete on the second worker")
    assert [(c.worker, c.redelivered) for c in done] == [(second, True)]
    assert queue_depth(broker, "long") == 0 and queue_depth(broker, "long.dead") == 0


def test_task_that_always_crashes_its_worker_is_dead_lettered(
        broker: Connection, celery_app: Any, start_worker: Any, redis_client: Any) -> None:
    start_worker("short", concurrency=1)
    fault_tasks.crash_worker.delay(msg("poison"))
    wait_for(lambda: queue_depth(broker, "short.dead") == 1, 120,
             "the poison message to reach short.dead")
    assert attempts(redis_client, "poison") == settings().max_deliveries
    [dead] = dead_letters(celery_app, broker, "short")
    assert dead.task == "tests.crash_worker" and dead.args[0]["id"] == "poison"
    assert (dead.reason, dead.from_queue) == ("delivery_limit", "short")
    assert queue_depth(broker, "short") == 0


def test_non_retryable_error_is_dead_lettered_at_once_with_its_error(
        broker: Connection, celery_app: Any, start_worker: Any, redis_client: Any) -> None:
    start_worker("medium", concurrency=1)
    fault_tasks.always_fail.delay(msg("bad-input", "medium"))
    wait_for(lambda: queue_depth(broker, "medium.dead") == 1, 60,
             "the failing message to reach medium.dead")
    assert attempts(redis_client, "bad-input") == 1
    [dead] = dead_letters(celery_app, broker, "medium")
    assert dead.reason == "rejected" and dead.from_queue == "medium"
    assert "ValueError" in dead.error and "boom bad-input" in dead.error


def test_retryable_error_is_dead_lettered_after_the_delivery_budget(
        broker: Connection, celery_app: Any, start_worker: Any, redis_client: Any) -> None:
    start_worker("short", concurrency=1)
    fault_tasks.always_transient.delay(msg("flaky"))
    wait_for(lambda: queue_depth(broker, "short.dead") == 1, 90,
             "the always-failing retried message to reach short.dead")
    assert attempts(redis_client, "flaky") == settings().max_deliveries
    [dead] = dead_letters(celery_app, broker, "short")
    assert "ConnectionError" in dead.error and dead.args[0]["id"] == "flaky"


def test_dead_message_can_be_replayed(broker: Connection, celery_app: Any, start_worker: Any,
                                      redis_client: Any) -> None:
    start_worker("medium", concurrency=1)
    fault_tasks.always_fail.delay(msg("again", "medium"))
    wait_for(lambda: queue_depth(broker, "medium.dead") == 1, 60, "first dead-lettering")
    assert replay_dead(broker, BUCKETS_BY_NAME["medium"]) == 1
    wait_for(lambda: attempts(redis_client, "again") == 2, 60, "the replayed message to run")
    wait_for(lambda: queue_depth(broker, "medium.dead") == 1, 60, "second dead-lettering")
