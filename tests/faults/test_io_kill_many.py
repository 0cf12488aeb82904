"""A worker killed (kill -9) with hundreds of async runs of stored recurring jobs in
flight, their token checks and reschedules sharing statements (scheduler/group_commit.py):
no job is lost, and no run happens twice but those the kill itself cut short.

Each job runs ``RUNS`` times (each run waits on the event loop, then reschedules the
next; the last finishes the job). The worker is killed while about its 200 pool
threads' runs are in flight, some of them settling. After a new worker takes over:
every job did every run and its row is gone (finished); a run (job, run number) done
twice is one the kill cut short (started before the kill), done at most once again;
a run first started after the kill is done exactly once.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest

from scheduler.store import DueStore, Job, close_stores
from scheduler.store.connection import make_engine
from scheduler.store.migrate import upgrade
from scheduler.wire import encode_call
from tests.support import io_tasks
from tests.support.private_postgres import private_postgres
from tests.support.processes import wait_for
from tests.support.scheduler_support import worker_env

pytestmark = pytest.mark.services

#: Jobs, and runs each (the io bucket's 200 threads by default, for 2 cores).
JOBS, RUNS, THREADS = 300, 3, 200
#: Seconds a run waits, and between a job's runs.
WAIT_S, EVERY_S = 2.0, 1.0
#: Seconds before the kill a run done again may have ended (its settle and ack take
#: milliseconds; room for a loaded CI machine).
SETTLING_S = 5.0


def mine(prefix: str) -> list[dict[str, Any]]:
    return [r for r in io_tasks.read_runs() if str(r["id"]).startswith(prefix)]


def test_kill_with_hundreds_in_flight_loses_none_and_reruns_only_the_cut(
        broker: Any, start_worker: Any, start_scheduler: Any) -> None:
    prefix = f"km-{uuid.uuid4().hex[:6]}-"
    with private_postgres() as pg:
        engine = make_engine(pg.url)
        upgrade(engine)
        engine.dispose()
        store = DueStore.open(pg.url)
        now = datetime.now(UTC)
        jobs = []
        for i in range(JOBS):
            key = f"{prefix}{i:03d}"
            msg = {"id": key, "user_id": f"u-{i}", "bucket": "io",
                   "payload": {"s": WAIT_S, "every": EVERY_S, "left": RUNS}}
            jobs.append(Job(key, "tests.io_cycle", "io",
                            encode_call([msg], {}, job_key=key, bucket="io"), now))
        store.schedule(jobs, now)
        env = {**worker_env(pg.url), "RECUR_IMPORTS": "tests.support.io_tasks"}
        first, _ = start_worker("io", concurrency=THREADS, env=env)
        start_scheduler(env)

        def in_flight() -> int:
            runs = mine(prefix)
            ended = Counter((r["id"], r["left"]) for r in runs if r["ev"] == "end")
            return sum(1 for r in runs if r["ev"] == "start" and not ended[r["id"], r["left"]])

        # some first runs done and settling, hundreds of runs waiting on the loop
        wait_for(lambda: in_flight() >= THREADS * 3 // 4
                 and any(r["ev"] == "end" for r in mine(prefix)), 60,
                 "hundreds of runs in flight", interval=0.02)
        cut = in_flight()
        first.kill9()
        killed_at = time.time()
        assert first.proc.returncode == -9
        start_worker("io", concurrency=THREADS, env=env)
        wait_for(lambda: store.stats(datetime.now(UTC)) is not None and not any(
            s.scheduled or s.dispatched for s in store.stats(datetime.now(UTC)).values()),
            180, "every job to finish", interval=0.5)
        store.close()
        close_stores()
    runs = mine(prefix)
    ends = Counter((r["id"], r["left"]) for r in runs if r["ev"] == "end")
    assert set(ends) == {(j.job_key, left) for j in jobs for left in range(1, RUNS + 1)}, \
        "a run was lost"
    first_start: dict[tuple[str, int], float] = {}
    for r in sorted((r for r in runs if r["ev"] == "start"), key=lambda r: r["t"]):
        first_start.setdefault((r["id"], r["left"]), r["t"])
    twice = {run: n for run, n in ends.items() if n > 1}
    assert all(n == 2 for n in twice.values()), f"a run done more than twice: {twice}"
    after_kill = [run for run in twice if first_start[run] > killed_at]
    assert not after_kill, f"runs started after the kill were done twice: {after_kill}"
    # a run done again was one settling at the kill (done, not yet acknowledged): it ended
    # just before, and ran again from the same dispatch (a redelivery, not a new dispatch)
    for run in twice:
        done = sorted((r for r in runs if (r["id"], r["left"]) == run and r["ev"] == "end"),
                      key=lambda r: r["t"])
        assert killed_at - SETTLING_S < done[0]["t"] < killed_at, (run, done, killed_at)
        assert done[0]["token"] == done[1]["token"], (run, done)
    print(f"\nkilled with {cut} runs in flight; {len(twice)} runs done again; "
          f"{sum(ends.values())} runs of {JOBS} x {RUNS}")
