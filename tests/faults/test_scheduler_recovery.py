"""The scheduler recovers as fast as the database: dispatching again within about
two seconds of PostgreSQL being back, not after a grown backoff."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from routing.broker import queue_depth
from scheduler.store import DueStore
from scheduler.store.connection import make_engine
from scheduler.store.migrate import upgrade
from tests.support.private_postgres import private_postgres
from tests.support.processes import wait_for
from tests.support.scheduler_support import recurring_jobs, worker_env

OUTAGE = 8.0
#: The scheduler's promise is ~2 s; the rest is slack for two loaded cores.
BACK_WITHIN = 5.0


def test_scheduler_dispatches_within_seconds_of_the_database_coming_back(
        broker: Any, start_scheduler: Any) -> None:
    with private_postgres() as pg:
        engine = make_engine(pg.url)
        upgrade(engine)
        engine.dispose()
        store = DueStore.open(pg.url)
        now = datetime.now(UTC)
        store.schedule(recurring_jobs(50, now - timedelta(seconds=1), every=60.0, runs=1,
                                      buckets=("short",)), now)
        scheduler = start_scheduler(worker_env(pg.url))
        wait_for(lambda: queue_depth(broker, "short") >= 50, 60, "the first dispatches")
        store.close()
        pg.stop()
        time.sleep(OUTAGE)  # the outage itself: nothing to wait for
        pg.start()
        back = time.monotonic()
        store = DueStore.open(pg.url)
        now = datetime.now(UTC)
        store.schedule(recurring_jobs(50, now - timedelta(seconds=1), every=60.0, runs=1,
                                      buckets=("short",)), now)
        store.close()
        wait_for(lambda: queue_depth(broker, "short") >= 100, 60,
                 "the scheduler to dispatch again")
        took = time.monotonic() - back
        assert scheduler.proc.poll() is None
    assert took <= BACK_WITHIN
