"""A task that catches the error of its own failed reschedule does not end its job.

The footgun: ``self.apply_async(countdown=…)`` fails (the database is down),
the task swallows the error and returns; before, the run then finished the
job (deleting its row) once the database was back, and the recurring job
ended silently. Now the run owes its reschedule: it writes it when the store
is back, and never finishes the job instead.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from routing.redis_client import get_redis
from scheduler.store import DueStore, Job, close_stores
from scheduler.store.connection import make_engine
from scheduler.store.migrate import upgrade
from tests.support.outage_tasks import INCLUDE, flag
from tests.support.private_postgres import private_postgres
from tests.support.processes import wait_for
from tests.support.scheduler_support import worker_env

TASK = "tests.catch_failed_reschedule"


def test_a_caught_failed_reschedule_is_written_later_never_turned_into_a_finish(
        broker: Any, start_worker: Any, start_scheduler: Any) -> None:
    redis = get_redis()
    with private_postgres() as pg:
        engine = make_engine(pg.url)
        upgrade(engine)
        engine.dispose()
        message = {"id": "footgun-1", "user_id": "u-1", "bucket": "short", "payload": None}
        store = DueStore.open(pg.url)
        now = datetime.now(UTC)
        store.schedule([Job("footgun-1", TASK, "short",
                            json.dumps({"args": [message], "kwargs": {}}), now)], now)
        store.close()
        # The budget is shorter than the outage: the reschedule really fails in the task.
        env = worker_env(pg.url, RECUR_OUTAGE_BUDGET="1")
        start_worker("short", concurrency=1, env=env, args=INCLUDE)
        start_scheduler(env)
        wait_for(lambda: bool(redis.exists(flag("started"))), 60, "the first run to start")
        pg.stop()
        redis.set(flag("down"), 1)
        wait_for(lambda: bool(redis.exists(flag("caught"))), 30,
                 "the task to catch its failed reschedule")
        pg.start()
        redis.set(flag("up"), 1)
        wait_for(lambda: int(redis.get(flag("runs:footgun-1")) or 0) >= 2, 60,
                 "the job's next run (its row was kept and rescheduled)")
        store = DueStore.open(pg.url)
        wait_for(lambda: not any(s.scheduled or s.dispatched
                                 for s in store.stats(datetime.now(UTC)).values()), 30,
                 "the second run to finish the job")
        store.close()
        close_stores()
    assert int(redis.get(flag("runs:footgun-1")) or 0) == 2
