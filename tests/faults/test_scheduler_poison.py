"""Poison jobs: a job whose lease keeps running out ends in its bucket's dead-letter queue.

Real worker and scheduler processes, a short lease; the tasks always fail or
always kill their worker (``tests/support/fault_tasks.py``).
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from kombu import Connection

from config.buckets_in_use import BUCKETS_BY_NAME
from config.settings import settings
from routing.deadletter import DeadMessage, list_dead, replay_dead
from scheduler.store import DueStore, Job
from tests.support import fault_tasks
from tests.support.processes import wait_for
from tests.support.scheduler_support import worker_env

pytestmark = pytest.mark.services

LEASE = "2"


def poison_job(task: str, bucket: str = "short") -> Job:
    ident = f"poison-{uuid.uuid4().hex[:8]}"
    msg = {"id": ident, "user_id": "u-1", "bucket": bucket, "payload": None}
    return Job(job_key=ident, task=task, bucket=bucket,
               args=json.dumps({"args": [msg], "kwargs": {}}), due_at=datetime.now(UTC))


def attempts(redis_client: Any, ident: str) -> int:
    return int(redis_client.get(fault_tasks.attempts_key(ident)) or 0)


def scheduler_copies(broker: Connection, bucket: str) -> list[DeadMessage]:
    """The dead letters the scheduler wrote (not the broker's own)."""
    dead = list_dead(broker, BUCKETS_BY_NAME[bucket], lambda _id: "", limit=1000)
    return [d for d in dead if d.from_queue == "due_jobs"]


def row_gone(store: DueStore, key: str) -> bool:
    return store.live_dispatch(key, wait=False) is None and not any(
        s.scheduled or s.dispatched for s in store.stats(datetime.now(UTC)).values())


@pytest.mark.parametrize("task", ["tests.always_fail", "tests.crash_worker"])
def test_a_job_whose_lease_keeps_expiring_is_dead_lettered_and_its_row_deleted(
        task: str, fresh_pg_url: str, broker: Connection, start_worker: Any,
        start_scheduler: Any, redis_client: Any) -> None:
    env = worker_env(fresh_pg_url, RECUR_LEASE_SECONDS=LEASE)
    start_worker("short", concurrency=1, env=env)
    store = DueStore.open(fresh_pg_url)
    job = poison_job(task)
    store.schedule([job], datetime.now(UTC))
    scheduler = start_scheduler(env)
    wait_for(lambda: len(scheduler_copies(broker, "short")) == 1, 120,
             "the scheduler to dead-letter the poison job")
    wait_for(lambda: row_gone(store, job.job_key), 10, "its row to be deleted")
    [dead] = scheduler_copies(broker, "short")
    limit = settings().max_deliveries
    if dead.reason.startswith("delivery limit"):
        # A copy whose last delivery died too within its (2 s) lease: the dead-letter
        # sweep dead-lettered the job (tests/faults/test_lost_copies.py, at the defaults).
        assert task == "tests.crash_worker"
    else:
        assert dead.reason == f"lease expired {limit} times"
        assert "moved to the dead-letter queues: short=1" in scheduler.log()
    assert dead.task == task and dead.args[0]["id"] == job.job_key
    # It ran (a copy whose lease ran out while a killed worker restarted is
    # dropped as stale, so not every dispatch runs), at most once per broker
    # delivery of each dispatch, and it stopped.
    ran = attempts(redis_client, job.job_key)
    assert 1 <= ran <= limit * limit
    store.close()


def test_a_replayed_dead_letter_of_a_job_runs_as_a_plain_message(
        fresh_pg_url: str, broker: Connection, start_worker: Any, start_scheduler: Any,
        redis_client: Any) -> None:
    env = worker_env(fresh_pg_url, RECUR_LEASE_SECONDS=LEASE)
    start_worker("short", concurrency=1, env=env)
    store = DueStore.open(fresh_pg_url)
    job = poison_job("tests.always_fail")
    store.schedule([job], datetime.now(UTC))
    start_scheduler(env)
    wait_for(lambda: len(scheduler_copies(broker, "short")) == 1, 120,
             "the scheduler to dead-letter the poison job")
    wait_for(lambda: row_gone(store, job.job_key), 10, "its row to be deleted")
    before = attempts(redis_client, job.job_key)
    # Replay everything: the broker's copies of failed dispatches carry a token
    # of the deleted row and are dropped as stale; the scheduler's copy runs.
    replay_dead(broker, BUCKETS_BY_NAME["short"], limit=1000)
    wait_for(lambda: attempts(redis_client, job.job_key) == before + 1, 60,
             "the replayed copy to run")
    wait_for(lambda: len(list_dead(broker, BUCKETS_BY_NAME["short"], lambda _id: "")) == 1,
             60, "its failure to be dead-lettered again (by the broker)")
    assert attempts(redis_client, job.job_key) == before + 1
    store.close()
