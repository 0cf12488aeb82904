"""A bucket file's default rates with real workers and a real scheduler: a task with no
decorator is limited by its bucket's ``rate_limit``, a task's own ``[tasks."<name>"]``
default beats its bucket's, and a task's own ``@rate_limit`` beats both. Every job runs
once and none is left in the store."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis

from scheduler.store import DueStore
from tests.support.bucket_rate_tasks import (
    INCLUDE,
    bucket_account_work,
    bucket_plain_work,
    read_starts,
    starts_key,
)
from tests.support.fixtures import spawn_worker
from tests.support.processes import wait_for
from tests.support.rate_tasks import least_span, rated_work, runs_key, window_violations
from tests.support.rate_tasks import read_starts as decorated_starts
from tests.support.scheduler_support import wait_until_empty, worker_env

pytestmark = pytest.mark.services

#: The bucket's default: 2 a second per user; the account task's own: 5 a second.
BUCKET_FILE = """
[buckets.short]
soft_time_limit = 30
time_limit = 45
concurrency = 2
pool = "prefork"
prefetch = 4
rate_limit = "2/s"

[tasks."tests.bucket_account_work"]
rate_limit = "5/s"
rate_key = "payload.account"
"""


def message(user: str, i: int, **payload: Any) -> dict[str, Any]:
    return {"id": f"{user}-{i}-{uuid.uuid4().hex[:6]}", "user_id": user, "bucket": "short",
            "payload": payload}


def span(starts: list[dict[str, Any]], key: str) -> float:
    times = sorted(s["t"] for s in starts if s["key"] == key)
    return times[-1] - times[0]


def test_bucket_file_rates_limit_tasks_without_a_decorator(
        celery_app: Any, fresh_pg_url: str, redis_client: redis.Redis, tmp_path: Path,
        start_scheduler: Any) -> None:
    tag = uuid.uuid4().hex[:6]
    hot, account, decorated = f"hot-{tag}", f"acct-{tag}", f"dec-{tag}"
    quiet = [f"quiet-{tag}-{k}" for k in range(4)]
    redis_client.delete(starts_key(), runs_key())
    (tmp_path / "buckets.toml").write_text(BUCKET_FILE)
    env = worker_env(fresh_pg_url, RECUR_BUCKETS_FILE=str(tmp_path / "buckets.toml"))
    worker, _ = spawn_worker(celery_app, "short", tmp_path / "logs", concurrency=2, env=env,
                             args=("--include", INCLUDE))
    start_scheduler(env)
    plain = [message(hot, i) for i in range(8)] + [message(q, 0) for q in quiet]
    by_account = [message(f"{tag}-one", i, account=account) for i in range(10)]
    by_decorator = [message(decorated, i, ms=1) for i in range(10)]
    try:
        for msg in plain:
            bucket_plain_work.apply_async((msg,))
        for msg in by_account:
            bucket_account_work.apply_async((msg,))
        for msg in by_decorator:
            rated_work.apply_async((msg,))
        wait_for(lambda: len(read_starts(redis_client)) >= len(plain) + len(by_account)
                 and len(decorated_starts(redis_client)) >= len(by_decorator), 60,
                 "every job's start")
        store = DueStore.open(fresh_pg_url)
        try:
            wait_until_empty(store, 30)  # every deferred job's row is gone
        finally:
            store.close()
    finally:
        worker.stop()
    starts, dec = read_starts(redis_client), decorated_starts(redis_client)
    assert Counter(s["id"] for s in starts) == Counter(m["id"] for m in plain + by_account)
    assert Counter(s["id"] for s in dec) == Counter(m["id"] for m in by_decorator)
    # The bucket's 2/s per user: 8 jobs of one user take at least 7 intervals.
    plain_starts = [s for s in starts if s["key"] != account]
    assert window_violations(plain_starts, rate=2, burst=1) == {}
    assert span(starts, hot) >= least_span(8, 2)
    first = min(s["t"] for s in plain_starts)
    assert max(s["t"] for s in plain_starts if s["key"] in quiet) - first < 2.0
    # The task's own 5/s on its account beats the bucket's 2/s on its (one) user.
    assert window_violations([s for s in starts if s["key"] == account], 5, 1) == {}
    assert least_span(10, 5) <= span(starts, account) < 9 / 2
    # @rate_limit's own 5/s beats the bucket's default.
    assert window_violations(dec, 5, 1) == {}
    assert least_span(10, 5) <= span(dec, decorated) < 9 / 2
