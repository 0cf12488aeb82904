"""The ``recur scheduler`` process with real workers: retry, pull-forward, watermarks,
several schedulers on one PostgreSQL store."""

from __future__ import annotations

import json
import re
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from routing.broker import queue_depth
from scheduler.store import DueStore, Job
from tests.support.processes import wait_for
from tests.support.scheduler_support import (
    RunLog,
    recurring_jobs,
    wait_until_empty,
    worker_env,
)
from tests.support.scheduler_tasks import INCLUDE


def now() -> datetime:
    return datetime.now(UTC)


def test_retry_goes_through_the_store_and_the_job_finishes(
        fresh_pg_url: str, broker: Any, start_worker: Any, start_scheduler: Any) -> None:
    env = worker_env(fresh_pg_url, RECUR_SCHEDULE_THRESHOLD="1")
    child, _ = start_worker("short", env=env, args=INCLUDE)
    store = DueStore.open(fresh_pg_url)
    msg = {"id": f"retry-{time.time_ns()}", "user_id": "u", "bucket": "short",
           "payload": {"retry_in": 2}}
    store.schedule([Job(msg["id"], "tests.retry_once", "short",
                        json.dumps({"args": [msg], "kwargs": {}}), now())], now())
    log = RunLog()
    start_scheduler(env)
    wait_for(lambda: log.poll()[msg["id"]] == 1, 60, "the retried job to complete")
    wait_until_empty(store, 10)
    assert "Retry in 2s" in child.log()
    store.close()


def test_a_published_message_retried_for_long_goes_through_the_store(
        fresh_pg_url: str, broker: Any, start_worker: Any, start_scheduler: Any) -> None:
    """Celery fills a retry's options from its request (exchange, routing key, reply_to,
    headers, delivery info): the store takes it as a retry, not as a producer's call whose
    options it would refuse."""
    from tests.support.scheduler_tasks import retry_once

    env = worker_env(fresh_pg_url, RECUR_SCHEDULE_THRESHOLD="1")
    child, _ = start_worker("short", env=env, args=INCLUDE)
    store = DueStore.open(fresh_pg_url)
    msg = {"id": f"retry-{time.time_ns()}", "user_id": "u", "bucket": "short",
           "payload": {"retry_in": 3}}
    log = RunLog()
    start_scheduler(env)
    retry_once.apply_async((msg,))  # to the broker: its worker's retry goes to the store
    wait_for(lambda: log.poll()[msg["id"]] == 1, 60, "the retried job to complete")
    wait_until_empty(store, 10)
    assert "Retry in 3s" in child.log()
    store.close()


def test_idle_workers_get_future_jobs_early(
        fresh_pg_url: str, broker: Any, start_worker: Any, start_scheduler: Any) -> None:
    env = worker_env(fresh_pg_url)
    start_worker("short", env=env)
    store = DueStore.open(fresh_pg_url)
    jobs = recurring_jobs(50, now() + timedelta(hours=1), every=60, runs=1, buckets=("short",))
    store.schedule(jobs, now())
    log = RunLog()
    sched = start_scheduler(env)
    wait_for(lambda: all(log.poll()[j.job_key] == 1 for j in jobs), 30,
             "jobs due in an hour to be pulled forward and processed")
    sched.stop()
    assert sched.proc.returncode == 0
    assert "SIGTERM: stopping after the batch in hand" in sched.log()
    assert "scheduler stopped" in sched.log()
    store.close()


def test_a_busy_bucket_gets_no_future_jobs(
        fresh_pg_url: str, broker: Any, start_worker: Any, start_scheduler: Any) -> None:
    # Each short job takes 0.5 s on one process: 400 due jobs keep the bucket busy.
    env = worker_env(fresh_pg_url, RECUR_WORK_SCALE="10", RECUR_LOW_WATERMARK="20",
                     RECUR_HIGH_WATERMARK="40", RECUR_DRAIN_BATCH="20")
    start_worker("short", concurrency=1, env=env)
    store = DueStore.open(fresh_pg_url)
    due = recurring_jobs(400, now() - timedelta(seconds=1), every=60, runs=1,
                         buckets=("short",))
    future = recurring_jobs(20, now() + timedelta(hours=1), every=60, runs=1,
                            buckets=("short",))
    store.schedule(due + future, now())
    log = RunLog()
    start_scheduler(env)
    wait_for(lambda: sum(log.poll()[j.job_key] for j in due) >= 10, 60, "due jobs running")
    assert not any(log.poll()[j.job_key] for j in future)
    assert store.stats(now() + timedelta(hours=2))["short"].scheduled >= 20 + 300
    store.close()


def test_queue_depth_stays_under_the_high_watermark(
        fresh_pg_url: str, broker: Any, start_worker: Any, start_scheduler: Any) -> None:
    high, batch = 1000, 250
    env = worker_env(fresh_pg_url, RECUR_LOW_WATERMARK="500", RECUR_HIGH_WATERMARK=str(high),
                     RECUR_DRAIN_BATCH=str(batch))
    store = DueStore.open(fresh_pg_url)
    jobs = recurring_jobs(100_000, now() - timedelta(seconds=1), every=60, runs=1,
                          buckets=("short",))
    for i in range(0, len(jobs), 10_000):
        store.schedule(jobs[i:i + 10_000], now())
    start_worker("short", concurrency=2, env=env)
    depths: list[int] = []
    done = threading.Event()

    def sample() -> None:
        with broker.clone() as conn:
            while not done.is_set():
                depths.append(queue_depth(conn, "short"))
                time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        sched = start_scheduler(env)
        wait_for(lambda: len(re.findall(r"short: queue had", sched.log())) >= 5, 120,
                 "the scheduler to refill the short queue five times")
    finally:
        done.set()
        sampler.join()
    assert max(depths) >= high // 2, "the queue was never filled"
    assert max(depths) <= high + batch
    assert store.stats(now())["short"].due > 90_000  # the population stayed in the store
    store.close()


def test_several_schedulers_never_dispatch_a_job_twice(
        fresh_pg_url: str, broker: Any, start_worker: Any, start_scheduler: Any) -> None:
    env = worker_env(fresh_pg_url, RECUR_DRAIN_BATCH="50", RECUR_LOW_WATERMARK="100",
                     RECUR_HIGH_WATERMARK="300")
    for queue in ("short", "medium"):
        start_worker(queue, concurrency=2, env=env)
    store = DueStore.open(fresh_pg_url)
    jobs = recurring_jobs(2000, now() - timedelta(seconds=1), every=60, runs=1,
                          buckets=("short", "medium"))
    store.schedule(jobs, now())
    log = RunLog()
    schedulers = [start_scheduler(env, name=f"scheduler{n}") for n in range(3)]
    wait_for(lambda: sum(log.poll()[j.job_key] for j in jobs) >= len(jobs), 120,
             "every job processed")
    wait_until_empty(store, 30)
    runs = log.poll()
    assert [j.job_key for j in jobs if runs[j.job_key] != 1] == []
    busy = [s for s in schedulers if "dispatched" in s.log()]
    assert len(busy) >= 2, "the schedulers did not drain concurrently"
    store.close()


def test_a_periodic_entry_fires_once_per_period_and_is_dispatched(
        fresh_pg_url: str, broker: Any) -> None:
    """The drain loop itself (in this process): beat-style entry → due job → queue."""
    from config.settings import load_settings
    from routing.queues import TASK_EXCHANGE
    from scheduler.drain import Scheduler
    from scheduler.periodic import entries_from_beat
    from scheduler.publisher import ConfirmingPublisher
    from tests.support.services import test_environment

    cfg = load_settings({**test_environment(), "RECUR_DATABASE_URL": fresh_pg_url,
                         "RECUR_PULL_FORWARD": ""})
    msg = {"id": "tick", "user_id": "ops", "bucket": "short", "payload": None}
    entries = entries_from_beat({"tick": {"task": "tasks.process_message", "schedule": 1.0,
                                          "args": (msg,)}}, cfg)
    store = DueStore.open(fresh_pg_url)
    scheduler = Scheduler(store, ConfirmingPublisher(cfg.broker_url, TASK_EXCHANGE.name), cfg,
                          periodic=entries)
    runner = threading.Thread(target=scheduler.run)
    runner.start()
    try:
        wait_for(lambda: queue_depth(broker, "short") >= 2, 30, "two periods fired")
    finally:
        scheduler.stopping.set()
        runner.join(timeout=30)
    fired = store.stats(now())
    assert queue_depth(broker, "short") <= 3
    assert fired["short"].dispatched == queue_depth(broker, "short")
    store.close()


def test_dispatch_lanes_share_the_room_and_never_send_a_row_twice(
        fresh_pg_url: str, broker: Any) -> None:
    """Three lanes of one dispatch: exactly the room is sent, every row at most once."""
    from config.buckets_in_use import BUCKETS_BY_NAME
    from config.settings import load_settings
    from routing.queues import TASK_EXCHANGE
    from scheduler.drain import Scheduler
    from scheduler.publisher import ConfirmingPublisher
    from scheduler.wire import DISPATCH_HEADER
    from tests.support.services import test_environment

    cfg = load_settings({**test_environment(), "RECUR_DATABASE_URL": fresh_pg_url,
                         "RECUR_DRAIN_BATCH": "100", "RECUR_DRAIN_THREADS": "3"})
    store = DueStore.open(fresh_pg_url)
    store.schedule(recurring_jobs(1250, now() - timedelta(seconds=1), every=60.0, runs=1,
                                  buckets=("short",)), now())
    scheduler = Scheduler(store, ConfirmingPublisher(cfg.broker_url, TASK_EXCHANGE.name), cfg)
    short = BUCKETS_BY_NAME["short"]
    try:
        assert scheduler.dispatch(short, 730, now(), early=False) == 730  # not a batch more
        assert store.stats(now())["short"].dispatched == 730
        assert scheduler.dispatch(short, 5000, now(), early=False) == 520  # what was left
    finally:
        scheduler.close_publishers()
    assert len(scheduler._lanes) == 2  # three lanes ran
    assert queue_depth(broker, "short") == 1250
    with broker.channel() as channel:
        keys = []
        while (message := channel.basic_get("short", no_ack=True)) is not None:
            keys.append(message.headers[DISPATCH_HEADER][0])
    assert len(keys) == len(set(keys)) == 1250  # each row sent once
    assert store.stats(now())["short"].scheduled == 0
    store.close()
