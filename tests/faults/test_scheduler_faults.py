"""Crashes around the scheduler: kill -9 of the scheduler mid-drain, of a worker mid-task."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from config.buckets_in_use import BUCKETS
from routing.broker import queue_depth
from scheduler.store import DueStore, close_stores
from scheduler.store.connection import make_engine
from scheduler.store.migrate import upgrade
from tests.support.private_postgres import private_postgres
from tests.support.processes import wait_for
from tests.support.scheduler_support import (
    RunLog,
    recurring_jobs,
    wait_until_empty,
    worker_env,
)
from tests.support.services import VHOST
from tests.support.tcp_proxy import TcpProxy

CYCLES = 2


def now() -> datetime:
    return datetime.now(UTC)


def test_scheduler_killed_mid_drain_loses_nothing(
        fresh_pg_url: str, broker: Any, start_worker: Any, start_scheduler: Any) -> None:
    env = worker_env(fresh_pg_url, RECUR_DRAIN_BATCH="50", RECUR_LOW_WATERMARK="100",
                     RECUR_HIGH_WATERMARK="200", RECUR_LEASE_SECONDS="30")
    for bucket in BUCKETS:
        start_worker(bucket.queue, concurrency=2, env=env)
    store = DueStore.open(fresh_pg_url)
    jobs = recurring_jobs(1500, now() - timedelta(seconds=1), every=1.0, runs=CYCLES)
    store.schedule(jobs, now())
    log = RunLog()
    first = start_scheduler(env, name="doomed")
    wait_for(lambda: len(re.findall("dispatched", first.log())) >= 6, 60,
             "the scheduler to be draining")
    first.kill9()
    wait_for(lambda: sum(log.poll().values()) > 0, 30, "some runs before the restart")
    start_scheduler(env, name="restarted")
    wait_for(lambda: all(log.poll()[j.job_key] >= CYCLES for j in jobs), 180,
             f"every job to run {CYCLES} times after the restart")
    wait_until_empty(store, 60)
    runs = log.poll()
    twice = [j.job_key for j in jobs if runs[j.job_key] > CYCLES]
    # A copy published by the killed scheduler is either dropped as stale (its
    # dispatch never committed) or is the live one: no job runs more often.
    assert twice == []
    store.close()


def test_worker_killed_mid_task_its_job_comes_back_and_completes(
        fresh_pg_url: str, broker: Any, start_worker: Any, start_scheduler: Any) -> None:
    # Short jobs take 1 s (0.05 s x 20): the worker is killed with jobs in hand.
    env = worker_env(fresh_pg_url, RECUR_WORK_SCALE="20", RECUR_LEASE_SECONDS="6")
    victim, _ = start_worker("short", concurrency=2, env=env)
    store = DueStore.open(fresh_pg_url)
    jobs = recurring_jobs(6, now() - timedelta(seconds=1), every=1.0, runs=1,
                          buckets=("short",))
    store.schedule(jobs, now())
    log = RunLog()
    start_scheduler(env)
    wait_for(lambda: "Task tasks.process_message" in victim.log(), 30, "a job to start")
    victim.kill9()
    start_worker("short", concurrency=2, env=env)
    wait_for(lambda: all(log.poll()[j.job_key] >= 1 for j in jobs), 60,
             "every job, including those of the killed worker, to complete")
    wait_until_empty(store, 30)
    store.close()


def test_database_outage_is_waited_out_and_loses_no_reschedule(
        broker: Any, start_worker: Any, start_scheduler: Any) -> None:
    with private_postgres() as pg:
        engine = make_engine(pg.url)
        upgrade(engine)
        engine.dispose()
        # Jobs take 0.5 s and recur every second, three times.
        env = worker_env(pg.url, RECUR_WORK_SCALE="10", RECUR_LEASE_SECONDS="15")
        start_worker("short", concurrency=2, env=env)
        store = DueStore.open(pg.url)
        jobs = recurring_jobs(10, now() - timedelta(seconds=1), every=1.0, runs=3,
                              buckets=("short",))
        store.schedule(jobs, now())
        store.close()
        log = RunLog()
        scheduler = start_scheduler(env)
        wait_for(lambda: sum(log.poll().values()) >= 5, 60, "the first runs")
        pg.stop()
        wait_for(lambda: "reconnecting in" in scheduler.log(), 30,
                 "the scheduler to report the outage and back off")
        pg.start()
        wait_for(lambda: all(log.poll()[j.job_key] >= 3 for j in jobs), 120,
                 "every job to run all its cycles after the outage")
        store = DueStore.open(pg.url)
        wait_until_empty(store, 60)
        store.close()
        close_stores()
        # The outage was ridden out: no message was dead-lettered because of it.
        assert queue_depth(broker, "short.dead") == 0


def test_broker_outage_is_waited_out_and_loses_nothing(
        fresh_pg_url: str, broker: Any, start_worker: Any, start_scheduler: Any) -> None:
    # The scheduler reaches RabbitMQ through a proxy the test cuts; workers do not.
    env = worker_env(fresh_pg_url, RECUR_LEASE_SECONDS="30")
    start_worker("short", concurrency=2, env=env)
    store = DueStore.open(fresh_pg_url)
    jobs = recurring_jobs(200, now() - timedelta(seconds=1), every=1.0, runs=3,
                          buckets=("short",))
    store.schedule(jobs, now())
    log = RunLog()
    with TcpProxy(("127.0.0.1", 5672)) as proxy:
        scheduler = start_scheduler({**env, "RECUR_BROKER_URL":
                                     f"amqp://guest:guest@127.0.0.1:{proxy.port}/{VHOST}"})
        wait_for(lambda: sum(log.poll().values()) >= 50, 60, "the first runs")
        proxy.cut()
        wait_for(lambda: "reconnecting in" in scheduler.log(), 30,
                 "the scheduler to report the broker outage and back off")
        stalled = sum(log.poll().values())
        proxy.restore()
        wait_for(lambda: all(log.poll()[j.job_key] >= 3 for j in jobs), 120,
                 "every job to run all its cycles after the outage")
        assert stalled < 3 * len(jobs)  # the outage came before the work was done
        wait_until_empty(store, 60)
    runs = log.poll()
    assert sorted({runs[j.job_key] for j in jobs}) == [3]  # none lost, none run twice
    store.close()
