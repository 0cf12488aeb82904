"""An idle ``recur scheduler`` sleeps longer between passes (scheduler/idle.py) but a job
written meanwhile still runs on time: one due later (any apply_async with a countdown)
at its due time plus a short interval, one due at once within the idle interval."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from config.settings import settings
from scheduler.store import DueStore, Job
from scheduler.store.control import JobControl
from tests.support.processes import wait_for
from tests.support.scheduler_support import RECURRING, RunLog, recurring_message, worker_env

IDLE_INTERVAL = 2.4
#: The scheduler's sleeps after its last busy pass (0.1 s doubling): at the idle
#: interval after 3.1 s. Each job is written this long after the last one ran.
DEEP_IDLE = 3.5
#: A job the store holds before it falls due: its due time plus a short interval (0.1 s)
#: plus the broker and the worker. Without the next-wake bound each would be late by a
#: random part of IDLE_INTERVAL (four all within 1 s: ~3 %).
ON_TIME = 1.0


def run_one(store: DueStore, log: RunLog, countdown: float) -> float:
    """Write one job due ``countdown`` s from now; how late the scheduler dispatched it.

    The dispatch time is the scheduler's own record: a dispatched row's due time is its
    lease end, the pass's time plus the lease. The worker's start is only the fallback (a
    run that finished between two looks): under a loaded machine it adds the worker's own
    delay, which is not what the idle bound promises."""
    time.sleep(DEEP_IDLE)  # not a wait for an outcome: lets the scheduler's sleep grow
    written = datetime.now(UTC)
    due_at = written + timedelta(seconds=countdown)
    msg = recurring_message(f"idle-{time.time_ns()}", "short", every=60, runs=1)
    store.schedule([Job(msg["id"], RECURRING, "short",
                        json.dumps({"args": [msg], "kwargs": {}}), due_at)], written)
    seen: list[datetime] = []
    control = JobControl(store)

    def dispatched_or_gone() -> bool:
        row = control.get(msg["id"])
        if row is not None and row.state == "dispatched":
            seen.append(row.due_at - timedelta(seconds=settings().lease_seconds))
        return row is None or bool(seen)

    wait_for(dispatched_or_gone, 60, f"job {msg['id']} to be dispatched", interval=0.02)
    wait_for(lambda: log.poll()[msg["id"]] == 1, 60, f"job {msg['id']} to run")
    started = next(c.started for c in log.entries if c.message_id == msg["id"])
    at = seen[0].timestamp() if seen else started
    return round(at - due_at.timestamp(), 2)


def test_jobs_written_while_the_scheduler_idles_run_within_the_bound(
        fresh_pg_url: str, broker: Any, start_worker: Any, start_scheduler: Any) -> None:
    env = worker_env(fresh_pg_url, RECUR_PULL_FORWARD="",
                     RECUR_SCHEDULER_IDLE_INTERVAL=str(IDLE_INTERVAL))
    start_worker("short", env=env)
    start_scheduler(env)
    store, log = DueStore.open(fresh_pg_url), RunLog()
    later = [run_one(store, log, countdown=5.0) for _ in range(4)]
    assert max(later) <= ON_TIME, f"a job due 5 s after it was written started late: {later}"
    at_once = run_one(store, log, countdown=0.0)  # a job moved to now (an operator)
    assert at_once <= IDLE_INTERVAL + ON_TIME, at_once
    store.close()
