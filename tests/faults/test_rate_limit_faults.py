"""@rate_limit when a worker is killed (-9) while its key's jobs wait on the limit:
the waiting jobs are rows in the due-jobs store, so none is lost, and the jobs run
after recovery still keep the rate in every 1-second window."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis

from scheduler.store import DueStore
from tests.support.fixtures import spawn_worker
from tests.support.processes import wait_for
from tests.support.rate_tasks import INCLUDE, rated_work, read_starts, runs_key, window_violations
from tests.support.scheduler_support import wait_until_empty, worker_env

pytestmark = pytest.mark.services


def test_a_worker_killed_while_jobs_wait_on_the_limit_loses_none_and_keeps_the_rate(
        celery_app: Any, fresh_pg_url: str, redis_client: redis.Redis, tmp_path: Path,
        start_scheduler: Any) -> None:
    redis_client.delete(runs_key())
    key = f"hot-{uuid.uuid4().hex[:6]}"
    env = worker_env(fresh_pg_url)
    first, _ = spawn_worker(celery_app, "short", tmp_path / "logs", concurrency=2, env=env,
                            args=("--include", INCLUDE))
    start_scheduler(env)
    sent = [{"id": f"{key}-{i}", "user_id": key, "bucket": "short", "payload": {"ms": 5}}
            for i in range(15)]
    for msg in sent:
        rated_work.apply_async((msg,))
    second = None
    try:
        wait_for(lambda: len(read_starts(redis_client)) >= 3, 30, "the first starts")
        first.kill9()  # most jobs are waiting for their slot, as rows in the store
        second, _ = spawn_worker(celery_app, "short", tmp_path / "logs", concurrency=2,
                                 env=env, args=("--include", INCLUDE))
        wait_for(lambda: {s["id"] for s in read_starts(redis_client)}
                 >= {m["id"] for m in sent}, 90, "every job's start after the kill")
        store = DueStore.open(fresh_pg_url)
        try:
            wait_until_empty(store, 60)
        finally:
            store.close()
    finally:
        first.stop()
        if second is not None:
            second.stop()
    starts = read_starts(redis_client)
    counts = Counter(s["id"] for s in starts)
    assert set(counts) == {m["id"] for m in sent}  # none lost
    # A job killed mid-run runs again (at least once); a waiting job is never doubled.
    assert sum(counts.values()) <= len(sent) + 2
    assert window_violations(starts) == {}
