"""A backend's crash (``kill -9`` of one backend, not the postmaster) loses fresh settle
writes without restarting the server; the settle journal still writes them again.

PostgreSQL answers the death of one backend by ending every other one, resetting
shared memory and replaying the WAL: commits made with ``synchronous_commit off``
whose WAL was not yet written are gone, and ``pg_postmaster_start_time()`` does
not change. The worker's journal sees the crash recovery (the statistics reset,
its broken connections) and writes its last settles again: every job runs on
within seconds, none waits for its 30-minute lease.
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

import psycopg
import pytest
from kombu import Connection

from scheduler.store import DueStore, Job
from scheduler.store.connection import make_engine
from scheduler.store.migrate import upgrade
from tests.support.outage_tasks import INCLUDE, RUNS_FILE, TASK, outage_message
from tests.support.private_postgres import PrivatePostgres, private_postgres
from tests.support.processes import wait_for

pytestmark = pytest.mark.services

#: Jobs whose first runs settle just before the backend is killed.
JOBS = 20
#: Their period: long enough that no durable dispatch commit flushes the WAL between
#: the first runs and the kill (a second run is pulled forward after half of it).
EVERY = 10.0


def dsn(pg: PrivatePostgres) -> str:
    return f"host=127.0.0.1 port={pg.port} user=postgres dbname=postgres"


def postmaster(pg: PrivatePostgres) -> tuple[int, Any]:
    """The postmaster's pid and start time: a backend's crash must change neither."""
    pid = int((pg.data / "postmaster.pid").read_text().split()[0])
    with psycopg.connect(dsn(pg)) as conn:
        row = conn.execute("SELECT pg_postmaster_start_time()").fetchone()
    assert row is not None
    return pid, row[0]


def kill_one_backend(pg: PrivatePostgres) -> None:
    """``kill -9`` one client backend (this test's own), as an OOM killer would."""
    conn = psycopg.connect(dsn(pg), autocommit=True)
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    os.kill(int(row[0]), signal.SIGKILL)
    conn.close()


def last_checkpoint(pg: PrivatePostgres) -> Any:
    """The server's last checkpoint (its WAL position); None while it is not answering."""
    try:
        with psycopg.connect(dsn(pg), connect_timeout=2) as conn:
            row = conn.execute("SELECT checkpoint_lsn FROM pg_control_checkpoint()").fetchone()
        return None if row is None else row[0]
    except psycopg.OperationalError:
        return None


def dispatched_after_run(store: DueStore, ids: list[str], runs_file: Path) -> int:
    """Jobs whose first run finished but whose row is still dispatched (a lost settle)."""
    done = {line.split()[0] for line in runs_file.read_text().splitlines()}
    return sum(1 for i in ids if i in done and store.live_dispatch(i, wait=False) is not None)


def test_settles_a_backend_crash_lost_are_written_again(
        broker: Connection, start_worker: Any, start_scheduler: Any, tmp_path: Path) -> None:
    # The WAL writer waits 10 s, so the crash surely loses the last settle writes.
    with private_postgres(options="-c wal_writer_delay=10000") as pg:
        engine = make_engine(pg.url)
        upgrade(engine)
        engine.dispose()
        runs_file = tmp_path / "runs.txt"
        env = {"RECUR_DATABASE_URL": pg.url, RUNS_FILE: str(runs_file)}
        worker, _ = start_worker("short", concurrency=2, env=env, args=INCLUDE)
        messages = [outage_message(f"bk-{uuid.uuid4().hex[:6]}-{i}", "short", EVERY, 2)
                    for i in range(JOBS)]
        ids = [m["id"] for m in messages]
        store = DueStore.open(pg.url)
        now = datetime.now(UTC)
        store.schedule([Job(m["id"], TASK, "short", json.dumps({"args": [m], "kwargs": {}}),
                            now) for m in messages], now)
        store.close()
        start_scheduler(env)
        before = postmaster(pg)

        def runs() -> list[str]:
            return runs_file.read_text().splitlines() if runs_file.exists() else []

        wait_for(lambda: len(runs()) >= JOBS, 60, "every first run", interval=0.05)
        os.killpg(worker.proc.pid, signal.SIGSTOP)  # its journal waits until we looked
        try:
            checkpoint = last_checkpoint(pg)
            kill_one_backend(pg)
            # Accepting right after the kill may be before the postmaster began recovery:
            # recovery from a crash ends with a checkpoint of its own.
            wait_for(lambda: last_checkpoint(pg) not in (None, checkpoint), 60,
                     "the server back from crash recovery")
            assert postmaster(pg) == before, "the postmaster restarted: not the case tested"
            back = time.monotonic()
            store = DueStore.open(pg.url)
            lost = dispatched_after_run(store, ids, runs_file)
        finally:
            os.killpg(worker.proc.pid, signal.SIGCONT)
        assert lost >= 1, "the crash lost no settle write: the test proved nothing"
        wait_for(lambda: len(runs()) >= 2 * JOBS, 60, "every second run, not after the lease")
        print(f"\nbackend crash lost {lost} of {JOBS} settle writes; every second run done "
              f"{time.monotonic() - back:.1f}s after the server was back")
        assert sorted(line.split()[0] for line in runs()) == sorted(ids * 2)
        wait_for(lambda: "settle writes again" in worker.log(), 10, "the journal's line")
        wait_for(lambda: all(store.live_dispatch(i, wait=False) is None for i in ids)
                 and not any(s.scheduled or s.dispatched
                             for s in store.stats(datetime.now(UTC)).values()), 30,
                 "every job finished")
        store.close()
