"""The I/O bucket's async tasks keep recur's guarantees: a worker killed mid-run
(kill -9) loses nothing, a run past its time limit is dead-lettered, and locked
jobs keep their user's order while hundreds wait on one event loop."""

from __future__ import annotations

import uuid
from collections import defaultdict
from typing import Any

import pytest
from kombu import Connection

from config.buckets_in_use import bucket_table
from config.settings import settings
from routing.deadletter import list_dead
from tests.support import io_tasks
from tests.support.processes import wait_for

pytestmark = pytest.mark.services

IO_ENV = {"RECUR_IMPORTS": "tests.support.io_tasks"}


def msg(mid: str, user: str = "u-1", **payload: Any) -> dict[str, Any]:
    return {"id": mid, "user_id": user, "bucket": "io", "payload": payload}


def events(mid: str, ev: str) -> list[dict[str, Any]]:
    return [r for r in io_tasks.read_runs() if r["id"] == mid and r["ev"] == ev]


def test_async_task_of_a_killed_worker_is_delivered_again_and_completes(
        broker: Connection, start_worker: Any, redis_client: Any) -> None:
    first, _ = start_worker("io", concurrency=20, env=IO_ENV)
    mid = f"kill-{uuid.uuid4().hex[:6]}"
    io_tasks.io_sleep.delay(msg(mid, s=30, again_s=0.1))
    wait_for(lambda: bool(events(mid, "start")), 30, "the async task to start")
    first.kill9()
    assert first.proc.returncode == -9 and not events(mid, "end")
    start_worker("io", concurrency=20, env=IO_ENV)
    wait_for(lambda: bool(events(mid, "end")), 60, "the killed task to complete again")
    (end,) = events(mid, "end")
    assert end["attempt"] == 2 and end["redelivered"]


def test_async_task_past_its_time_limits_is_dead_lettered(
        broker: Connection, start_worker: Any, celery_app: Any) -> None:
    """Past the soft limit the coroutine is cancelled and the task fails: rejected into
    io.dead at once. One that ignores the cancel hits the hard limit, which (like a
    prefork child killed at its hard limit) returns the message until the quorum
    queue's delivery limit dead-letters it."""
    start_worker("io", concurrency=20, env=IO_ENV)
    soft, hard = f"soft-{uuid.uuid4().hex[:6]}", f"hard-{uuid.uuid4().hex[:6]}"
    io_tasks.io_sleep.apply_async((msg(soft, s=30),), soft_time_limit=1, time_limit=3)
    io_tasks.io_sleep.apply_async((msg(hard, s=30, again_s=30, stubborn=True),),
                                  soft_time_limit=1, time_limit=2)

    def dead() -> dict[str, Any]:
        def error_of(task_id: str) -> str:
            result = celery_app.AsyncResult(task_id)
            return repr(result.result) if result.state == "FAILURE" else ""

        return {d.args[0]["id"]: d for d in list_dead(broker, bucket_table().get("io"),
                                                       error_of)}

    wait_for(lambda: {soft, hard} <= set(dead()), 90, "both runs dead-lettered")
    found = dead()
    assert found[soft].reason == "rejected"
    assert "SoftTimeLimitExceeded" in found[soft].error
    assert found[hard].reason == "delivery_limit"
    assert len(events(hard, "start")) == settings().max_deliveries
    assert not events(soft, "end") and not events(hard, "end")
    assert len(events(soft, "start")) == 1 and events(soft, "cancelled")


def test_locked_async_jobs_keep_each_users_order(
        broker: Connection, start_worker: Any) -> None:
    start_worker("io", concurrency=100, env=IO_ENV)
    run = uuid.uuid4().hex[:6]
    users, per_user = 10, 8
    for n in range(per_user):
        for u in range(users):
            io_tasks.io_locked.delay(msg(f"{run}-{u}-{n}", f"{run}-user-{u}", n=n, ms=30))

    def ended() -> list[dict[str, Any]]:
        return [r for r in io_tasks.read_runs() if r["ev"] == "end" and r["id"].startswith(run)]

    wait_for(lambda: len(ended()) == users * per_user, 90, "every locked job to run")
    by_user: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in io_tasks.read_runs():
        if r["id"].startswith(run):
            by_user[r["user"]].append(r)
    for user, records in by_user.items():
        records.sort(key=lambda r: (r["t"], r["ev"] == "start"))
        starts = [r["n"] for r in records if r["ev"] == "start"]
        assert starts == list(range(per_user)), (user, starts)
        assert [r["ev"] for r in records] == ["start", "end"] * per_user, user  # no overlap
    starts = sorted(r["t"] for r in io_tasks.read_runs()
                    if r["ev"] == "start" and r["id"].startswith(run))
    assert len({r["pid"] for r in ended()}) == 1  # one worker process ran them all
    assert starts[users - 1] - starts[0] < 1.0  # different users' jobs ran side by side
