"""Redis holds bounded sets, checked against the real Redis and worker processes: a
user's line and parked jobs (RECUR_LOCK_MAX_PARKED), one resequencer result
(RECUR_RESEQ_MAX_ENTRY_BYTES) and failed tasks' errors (RECUR_RESULT_EXPIRES).
Over a cap is a named refusal or a wait that loses nothing, never a silent drop."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kombu import Connection

from config import keys
from config.errors import LockLineFull
from config.settings import settings
from routing.reseq.dead_letters import list_letters
from routing.reseq.intake import submit
from routing.reseq.state import Resequencer
from tasks.distlock import runtime as lock_runtime
from tests.support import fault_tasks
from tests.support.distlock_checks import (
    INCLUDE,
    assert_one_at_a_time_in_order,
    ended,
    message,
    runs_by_user,
)
from tests.support.hostile_tasks import SIZED_STEP
from tests.support.locked_tasks import locked_work
from tests.support.processes import wait_for
from tests.support.receiver import Receiver
from tests.support.resequencer_rig import Rig, rig_environment

pytestmark = pytest.mark.services


@pytest.fixture
def publisher_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """Give this (publishing) process other RECUR_* settings for one test."""
    def use(**env: str) -> None:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        settings.cache_clear()
        monkeypatch.setattr(lock_runtime, "_current", None)  # a lock runtime with them

    yield use
    monkeypatch.undo()
    settings.cache_clear()


def test_apply_async_refuses_a_job_over_its_users_line_and_publishes_nothing(
        broker: Connection, start_worker: Any, redis_client: redis.Redis,
        publisher_env: Callable[..., None]) -> None:
    publisher_env(RECUR_LOCK_MAX_PARKED="3")
    start_worker("short", concurrency=2, args=INCLUDE, env={"RECUR_LOCK_MAX_PARKED": "3"})
    user = f"line-{uuid.uuid4().hex[:6]}"
    locked_work.delay(message(user, 0, ms=1500))  # runs; three more may wait behind it
    for i in range(1, 4):
        locked_work.delay(message(user, i))
    with pytest.raises(LockLineFull, match=f"user '{user}' already has 3 jobs waiting"):
        locked_work.delay(message(user, 4))
    order = [f"{user}-{i}" for i in range(4)]
    wait_for(lambda: ended(redis_client, set(order)) == set(order), 30, "the accepted jobs")
    assert_one_at_a_time_in_order(runs_by_user(redis_client, {user})[user], order)
    # The refused job was never published; once the line is shorter, it is accepted.
    locked_work.delay(message(user, 4))
    wait_for(lambda: ended(redis_client, {f"{user}-4"}) == {f"{user}-4"}, 30, "the retry")
    runs = runs_by_user(redis_client, {user})[user]
    assert [e["id"] for e in runs if e["ev"] == "start"] == [*order, f"{user}-4"]


def test_jobs_already_sent_beyond_the_cap_wait_in_the_broker_and_all_run_in_order(
        broker: Connection, start_worker: Any, redis_client: redis.Redis) -> None:
    # This process numbers them (its cap is the default); the workers' cap is 2, so
    # the third and later find their user's parked jobs full when they arrive.
    child, _ = start_worker("short", concurrency=2, args=INCLUDE,
                            env={"RECUR_LOCK_MAX_PARKED": "2", "RECUR_LOCK_CHAIN_SECONDS": "0"})
    user = f"park-{uuid.uuid4().hex[:6]}"
    parked_key = keys.user_lock(settings().key_prefix, user, "parked")
    most, stop = [0], threading.Event()

    def watch() -> None:
        while not stop.wait(0.02):
            most[0] = max(most[0], int(redis_client.zcard(parked_key)))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        locked_work.delay(message(user, 0, ms=2000))
        for i in range(1, 7):
            locked_work.delay(message(user, i, ms=200))
        order = [f"{user}-{i}" for i in range(7)]
        wait_for(lambda: ended(redis_client, set(order)) == set(order), 60, "every job")
    finally:
        stop.set()
        watcher.join(5)
    assert_one_at_a_time_in_order(runs_by_user(redis_client, {user})[user], order)
    assert 1 <= most[0] <= 2, f"parked jobs peaked at {most[0]}"
    assert "not parked: user" in child.log() and "waits in the broker" in child.log()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as r:
        yield r


def test_a_result_over_the_entry_cap_is_set_aside_by_name_and_the_rest_is_sent(
        celery_app: Any, receiver: Receiver, redis_client: redis.Redis,
        tmp_path: Path) -> None:
    env = rig_environment(receiver, ["sized"], reseq_steps=f"sized:{SIZED_STEP}",
                          imports="tests.support.resequencer_work,tests.support.hostile_tasks",
                          reseq_max_entry_bytes="1000", reseq_gap_timeout="60")
    rig = Rig(celery_app, env, tmp_path)
    try:
        rig.processing_worker(concurrency=2)
        rig.sender_worker(concurrency=2)
        sizes = [10, 5000, 10, 990]
        for i, size in enumerate(sizes):
            submit("sized", {"id": f"sz{i}", "user_id": "u", "bucket": "short",
                             "payload": {"size": size}}, rig.cfg)
        reseq = Resequencer(redis_client, rig.cfg)
        wait_for(lambda: reseq.status("sized").next_seq == len(sizes) + 1, 30,
                 "every message handled")
        assert receiver.seqs("sized") == [1, 3]  # 990 + its JSON is over 1000 too
        with celery_app.connection_for_write() as conn:
            letters = {d.seq: d for d in list_letters(conn, "sized")}
        assert sorted(letters) == [2, 4]
        for seq in (2, 4):
            reason = letters[seq].reason
            assert "ResultTooLarge" in reason and f"message 'sz{seq - 1}'" in reason, reason
            assert "bytes as JSON, over RECUR_RESEQ_MAX_ENTRY_BYTES=1000" in reason, reason
        assert reseq.status("sized").buffered == 0
    except BaseException:
        print(rig.logs())
        raise
    finally:
        rig.close()


def test_a_failed_tasks_error_is_kept_for_result_expires_not_a_week(
        broker: Connection, start_worker: Any, redis_client: redis.Redis) -> None:
    start_worker("short", concurrency=1, env={"RECUR_RESULT_EXPIRES": "120"})
    failed = fault_tasks.always_fail.delay({"id": f"f-{uuid.uuid4().hex[:6]}",
                                            "user_id": "u", "bucket": "short", "payload": None})
    meta = f"{keys.celery_prefix(settings().key_prefix)}celery-task-meta-{failed.id}"
    wait_for(lambda: redis_client.exists(meta), 30, "the stored failure")
    assert 0 < redis_client.ttl(meta) <= 120
    assert settings().result_expires == 86400  # the default: a day
