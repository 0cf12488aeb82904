"""A dispatched job whose copy is gone never waits for its 30-minute lease.

With recur's DEFAULT settings (RECUR_LEASE_SECONDS 1800): a copy returned to
its delivery limit by consumers that never ran it is dispatched again within
seconds; a job that kills its worker on every delivery is dead-lettered and
stays so; a settle write a database crash lost is written again, so the job
runs on.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kombu import Connection

from config.buckets_in_use import BUCKETS_BY_NAME
from config.settings import settings
from routing.broker import queue_depth
from routing.deadletter import list_dead
from scheduler.store import DueStore, Job
from scheduler.store.connection import make_engine
from scheduler.store.migrate import upgrade
from tests.support import fault_tasks
from tests.support.outage_tasks import INCLUDE, RUNS_FILE, TASK, outage_message
from tests.support.private_postgres import private_postgres
from tests.support.processes import wait_for

pytestmark = pytest.mark.services

SHORT = BUCKETS_BY_NAME["short"]
#: Seconds within which a lost copy's job must be dispatched again: the sweep reads
#: every 2 s; the lease it must not wait for is 1,800 s.
PROMPTLY = 15.0


def one_job(task: str) -> Job:
    ident = f"lost-{uuid.uuid4().hex[:8]}"
    msg = {"id": ident, "user_id": f"u-{ident}", "bucket": "short", "payload": None}
    return Job(job_key=ident, task=task, bucket="short",
               args=json.dumps({"args": [msg], "kwargs": {}}), due_at=datetime.now(UTC))


def ran(redis_client: Any, job: Job) -> int:
    return int(redis_client.get(fault_tasks.attempts_key(job.job_key)) or 0)


def take_and_drop(broker: Connection) -> bool:
    """Take the copy in the short queue (if there) and close the channel without
    acknowledging it: a consumer that died, or lost its connection, with the copy
    prefetched. The copy goes back to the queue with one more delivery counted."""
    channel = broker.channel()
    try:
        return channel.basic_get(SHORT.queue, no_ack=False) is not None
    finally:
        channel.close()


def return_unrun(broker: Connection, times: int) -> None:
    for _ in range(times):
        wait_for(lambda: take_and_drop(broker), 30, "the copy in the short queue",
                 interval=0.05)


def test_a_copy_returned_to_its_delivery_limit_unrun_is_dispatched_again_in_seconds(
        fresh_pg_url: str, broker: Connection, start_worker: Any, start_scheduler: Any,
        redis_client: Any) -> None:
    env = {"RECUR_DATABASE_URL": fresh_pg_url}  # recur's defaults: a 1,800 s lease
    store = DueStore.open(fresh_pg_url)
    job = one_job("tests.count_run")
    store.schedule([job], datetime.now(UTC))
    start_scheduler(env)
    wait_for(lambda: store.live_dispatch(job.job_key, wait=False) is not None, 30,
             "the job dispatched")
    first = store.live_dispatch(job.job_key, wait=False)
    assert first is not None
    return_unrun(broker, settings().max_deliveries)  # the broker dead-letters it
    returned = time.monotonic()

    def dispatched_again() -> bool:
        live = store.live_dispatch(job.job_key, wait=False)
        return live is not None and live[0] > first[0]

    wait_for(dispatched_again, PROMPTLY, "the job dispatched again, not after its lease",
             interval=0.05)
    print(f"\nunrun copy dead-lettered: job dispatched again "
          f"{time.monotonic() - returned:.2f}s later")
    start_worker("short", concurrency=1, env=env)
    wait_for(lambda: ran(redis_client, job) == 1, 60, "the job to run")
    wait_for(lambda: store.live_dispatch(job.job_key, wait=False) is None
             and queue_depth(broker, SHORT.dead_queue) == 0, 30,
             "its row finished and no copy left in short.dead")
    assert ran(redis_client, job) == 1  # the copies never ran; the new one ran once
    store.close()


def test_a_job_that_kills_its_worker_on_every_delivery_ends_in_dead_and_stays(
        fresh_pg_url: str, broker: Connection, start_worker: Any, start_scheduler: Any,
        redis_client: Any) -> None:
    env = {"RECUR_DATABASE_URL": fresh_pg_url}
    start_worker("short", concurrency=1, env=env)
    store = DueStore.open(fresh_pg_url)
    job = one_job("tests.crash_worker")
    store.schedule([job], datetime.now(UTC))
    start_scheduler(env)
    limit = settings().max_deliveries

    def dead() -> list[Any]:
        return list_dead(broker, SHORT, lambda _id: "", limit=100)

    # The broker's copy is replaced by the job's own dead letter (replayable: no
    # dispatch header), one per dead job.
    wait_for(lambda: [d.from_queue for d in dead()] == ["due_jobs"], 120,
             "the job's dead letter alone in short.dead")
    [letter] = dead()
    assert letter.reason.startswith(f"delivery limit: delivered {limit} times")
    assert letter.args[0]["id"] == job.job_key and letter.task == "tests.crash_worker"
    # Published (confirmed) before the row's delete commits: a crash between leaves
    # a duplicate dead letter, never a loss.
    wait_for(lambda: store.live_dispatch(job.job_key, wait=False) is None, 10,
             "its row deleted")
    assert ran(redis_client, job) == limit  # each delivery ran it once, and died
    # It stays: several sweeps later nothing moved and it never ran again.
    time.sleep(3 * 2.0)
    assert len(dead()) == 1 and ran(redis_client, job) == limit
    assert not any(s.scheduled or s.dispatched for s in store.stats(datetime.now(UTC)).values())
    store.close()


#: Jobs whose first runs settle just before the database crashes.
JOBS = 20
#: Their period: the second run is due this long after the first (pulled forward
#: after half of it): long enough that no dispatch commits (and flushes the WAL)
#: between the first runs and the crash.
EVERY = 10.0


def dispatched_after_run(store: DueStore, ids: list[str], runs_file: Path) -> int:
    """Jobs whose first run finished but whose row is still dispatched (a lost settle)."""
    done = {line.split()[0] for line in runs_file.read_text().splitlines()}
    return sum(1 for i in ids if i in done and store.live_dispatch(i, wait=False) is not None)


def test_settle_writes_a_database_crash_lost_are_written_again(
        broker: Connection, start_worker: Any, start_scheduler: Any, tmp_path: Path) -> None:
    # The WAL writer waits 10 s, so the crash surely loses the last settle writes
    # (recur's settings stay the defaults; this only makes the fault certain).
    with private_postgres(options="-c wal_writer_delay=10000") as pg:
        engine = make_engine(pg.url)
        upgrade(engine)
        engine.dispose()
        runs_file = tmp_path / "runs.txt"
        env = {"RECUR_DATABASE_URL": pg.url, RUNS_FILE: str(runs_file)}
        worker, _ = start_worker("short", concurrency=2, env=env, args=INCLUDE)
        messages = [outage_message(f"crash-{uuid.uuid4().hex[:6]}-{i}", "short", EVERY, 2)
                    for i in range(JOBS)]
        ids = [m["id"] for m in messages]
        store = DueStore.open(pg.url)
        now = datetime.now(UTC)
        store.schedule([Job(m["id"], TASK, "short", json.dumps({"args": [m], "kwargs": {}}),
                            now) for m in messages], now)
        store.close()
        start_scheduler(env)

        def runs() -> list[str]:
            return runs_file.read_text().splitlines() if runs_file.exists() else []

        wait_for(lambda: len(runs()) >= JOBS, 60, "every first run", interval=0.05)
        pg.crash()
        os.killpg(worker.proc.pid, signal.SIGSTOP)  # its journal waits until we looked
        try:
            pg.start()
            back = time.monotonic()
            store = DueStore.open(pg.url)
            lost = dispatched_after_run(store, ids, runs_file)
        finally:
            os.killpg(worker.proc.pid, signal.SIGCONT)
        assert lost >= 1, "the crash lost no settle write: the test proved nothing"
        wait_for(lambda: len(runs()) >= 2 * JOBS, 60, "every second run, not after the lease")
        print(f"\ncrash lost {lost} of {JOBS} settle writes; every second run done "
              f"{time.monotonic() - back:.1f}s after the database was back")
        assert sorted(line.split()[0] for line in runs()) == sorted(ids * 2)
        wait_for(lambda: all(store.live_dispatch(i, wait=False) is None for i in ids)
                 and not any(s.scheduled or s.dispatched
                             for s in store.stats(datetime.now(UTC)).values()), 30,
                 "every job finished")
        store.close()
