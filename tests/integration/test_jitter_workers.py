"""Jitter with a real scheduler and worker: a population due at once is rescheduled
onto each key's phase; without jitter it stays together, ``every`` after its run."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any

from sqlalchemy import select

from routing.jitter import phase
from scheduler.store import DueStore, Job
from scheduler.store.due_histogram import due_histogram
from scheduler.store.schema import due_jobs
from tests.support.processes import wait_for
from tests.support.scheduler_support import RunLog, worker_env

EVERY = 600.0


def jobs(prefix: str, count: int, jitter: float | None, due: datetime) -> list[Job]:
    found = []
    for i in range(count):
        payload: dict[str, Any] = {"every": EVERY, "runs": 5}
        if jitter is not None:
            payload["jitter"] = jitter
        msg = {"id": f"{prefix}-{i}", "user_id": f"u{i % 7}", "bucket": "short",
               "payload": payload}
        found.append(Job(msg["id"], "tasks.process_message", "short",
                         json.dumps({"args": [msg], "kwargs": {}}), due))
    return found


def rescheduled(store: DueStore) -> dict[str, tuple[datetime, int]]:
    """job key -> (due time, runs) of the rows that ran at least once."""
    with store.engine.connect() as conn:
        rows = conn.execute(select(due_jobs.c.job_key, due_jobs.c.due_at, due_jobs.c.runs)
                            .where(due_jobs.c.runs > 0, due_jobs.c.state == 0))
        return {str(k): (d, int(r)) for k, d, r in rows}


def test_jobs_with_jitter_land_on_their_phase(
        fresh_pg_url: str, broker: Any, start_worker: Any, start_scheduler: Any) -> None:
    env = worker_env(fresh_pg_url)
    start_worker("short", env=env)
    store = DueStore.open(fresh_pg_url)
    at = datetime.now(UTC) - timedelta(seconds=1)
    spread, burst = jobs(f"jit{time.time_ns()}", 200, 1.0, at), jobs("plain", 50, None, at)
    store.schedule(spread + burst, at)
    log = RunLog()
    started = time.time()
    start_scheduler(env)
    wait_for(lambda: len(rescheduled(store)) == 250, 90, "every job to run and reschedule")
    finished = time.time()
    rows = rescheduled(store)
    for job in spread:  # exactly on the key's slot k x every + phase, within an interval
        due = rows[job.job_key][0].timestamp()
        assert abs((due - phase(job.job_key, EVERY, 1.0)) % EVERY) < 1e-3 or \
            abs((due - phase(job.job_key, EVERY, 1.0)) % EVERY - EVERY) < 1e-3
        assert at.timestamp() + 1.0 * EVERY - 0.01 <= due < at.timestamp() + 2 * EVERY
    offsets = sorted(rows[j.job_key][0].timestamp() % EVERY for j in spread)
    assert max(b - a for a, b in pairwise(offsets)) < EVERY / 10
    for job in burst:  # no jitter: every after its run, as before
        due = rows[job.job_key][0].timestamp()
        assert started + EVERY - 1 <= due <= finished + EVERY + 1
    assert all(log.poll()[j.job_key] >= 1 for j in spread + burst)
    # The histogram shows both: the un-jittered burst in one minute, the rest spread.
    minutes = due_histogram(store, ["short"], datetime.now(UTC), 60)["short"]
    assert sum(minutes) == 250 and max(minutes) >= 50
    assert sum(1 for n in minutes if n) >= 10
    store.close()
