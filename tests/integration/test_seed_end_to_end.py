"""Seeded rows are drained by the real scheduler and run by real bucket workers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyspark.sql import SparkSession

from config.buckets_in_use import BUCKETS
from scheduler.store import DueStore
from scheduler.store.connection import libpq_url
from spark.job import run_seed
from spark.options import parse_options
from tests.support.processes import wait_for
from tests.support.scheduler_support import RunLog, wait_until_empty, worker_env

pytestmark = pytest.mark.services
SEEDED = 600


def test_seeded_population_is_drained_and_processed_once_each(
        spark_session: SparkSession, fresh_pg_url: str, broker: Any, start_worker: Any,
        start_scheduler: Any, tmp_path: Path) -> None:
    start = datetime.now(UTC) - timedelta(minutes=1)
    opts = parse_options(["--generate", str(SEEDED), "--seed", "11", "--spread", "10s",
                          "--start", start.isoformat(), "--database-url", fresh_pg_url,
                          "--rejects", str(tmp_path / "rejects")])
    report = run_seed(spark_session, opts, emit=lambda _line: None)
    assert report.loaded == SEEDED
    with psycopg.connect(libpq_url(fresh_pg_url)) as conn:
        seeded = {key for (key,) in conn.execute("SELECT job_key FROM due_jobs")}
    assert len(seeded) == SEEDED

    log = RunLog()
    env = worker_env(fresh_pg_url)
    for bucket in BUCKETS:
        start_worker(bucket.queue, concurrency=2, env=env)
    start_scheduler(env)
    wait_for(lambda: set(log.poll()) >= seeded, 180, f"{SEEDED} seeded messages processed")
    store = DueStore.open(fresh_pg_url)
    try:
        wait_until_empty(store, 30)  # each finished job's row is gone
    finally:
        store.close()
    runs = log.poll()
    assert {key: runs[key] for key in seeded} == dict.fromkeys(seeded, 1)
    assert all(c.worker.split("-")[0] == c.bucket for c in log.entries if c.message_id in seeded)
