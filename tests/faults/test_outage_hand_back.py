"""A database outage longer than the task's budget hands messages back without
spending their deliveries: none is dead-lettered, however often it comes round."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

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

BUDGET = 1.0
#: Many budgets long: with few jobs each comes round every second or two, so rejecting
#: with requeue would pass the delivery limit (4) several times over.
OUTAGE = 10.0
JOBS = 4
#: Runs of each job: the jobs are still going when the outage comes.
RUNS = 8


def test_an_outage_longer_than_the_budget_dead_letters_nothing(
        broker: Any, start_worker: Any, start_scheduler: Any) -> None:
    with private_postgres() as pg:
        engine = make_engine(pg.url)
        upgrade(engine)
        engine.dispose()
        # Runs take 1 s (0.05 s x 20), so messages are in hand when the database stops.
        env = worker_env(pg.url, RECUR_OUTAGE_BUDGET=str(BUDGET), RECUR_WORK_SCALE="20")
        start_worker("short", concurrency=2, env=env)
        store = DueStore.open(pg.url)
        now = datetime.now(UTC)
        jobs = recurring_jobs(JOBS, now - timedelta(seconds=1), every=0.5, runs=RUNS,
                              buckets=("short",))
        store.schedule(jobs, now)
        store.close()
        log = RunLog()
        start_scheduler(env)
        wait_for(lambda: sum(log.poll().values()) >= 2 * JOBS, 60, "the first runs")
        pg.stop()
        time.sleep(OUTAGE)  # the outage itself: nothing to wait for
        pg.start()
        assert min(log.poll()[j.job_key] for j in jobs) < RUNS  # the outage hit live jobs
        wait_for(lambda: all(log.poll()[j.job_key] >= RUNS for j in jobs), 90,
                 "every job to run all its runs after the outage")
        store = DueStore.open(pg.url)
        wait_until_empty(store, 60)
        store.close()
        close_stores()
    assert queue_depth(broker, "short.dead") == 0
