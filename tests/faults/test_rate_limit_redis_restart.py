"""@rate_limit when its Redis is killed (-9) and restarted with no data while real
workers have rate-limited jobs waiting (held for their slot, and in the due-jobs
store): the limits resume from nothing, every job still starts once, and the
workers log no traceback.

The limiter's Redis is a private redis-server without persistence on a free port (the
shared one stays up); run records go to the shared Redis.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from config import keys
from config.settings import settings
from scheduler.store import DueStore
from tasks.flow import submit
from tests.support import services
from tests.support.fixtures import spawn_worker
from tests.support.private_redis import PrivateRedis
from tests.support.processes import wait_for
from tests.support.rate_tasks import (
    BURST,
    INCLUDE,
    RATE,
    rated_work,
    read_starts,
    runs_key,
    window_violations,
)
from tests.support.scheduler_support import wait_until_empty, worker_env

pytestmark = pytest.mark.services

#: Jobs per key: "long" has more than a store threshold's worth (5 s at 5/s), so some of
#: its jobs wait in the due-jobs store, the others' wait in the workers (eta).
JOBS = {"long": 40, "b": 12, "c": 12}


@pytest.fixture
def limit_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path, extra=("--appendonly", "no"))  # a restart loses all
    server.start()
    yield server
    server.stop()


def test_redis_restarted_empty_mid_run_limits_resume_and_no_job_is_lost(
        celery_app: Any, fresh_pg_url: str, redis_client: redis.Redis, tmp_path: Path,
        start_scheduler: Any, limit_redis: PrivateRedis, use_store: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    redis_client.delete(runs_key())
    use_store(fresh_pg_url)  # a job whose slot is far is written to the store when published
    # This process places the jobs it publishes in the limiter's Redis, as workers read it.
    monkeypatch.setattr(submit, "get_redis", lambda: limit_redis.client)
    env = worker_env(fresh_pg_url, RECUR_REDIS_URL=limit_redis.url,
                     RECUR_RESULT_BACKEND=services.REDIS_URL,
                     RECURTEST_RECORD_URL=services.REDIS_URL)
    tag = uuid.uuid4().hex[:6]
    sent = [{"id": f"{key}-{tag}-{i}", "user_id": f"{key}-{tag}", "bucket": "short",
             "payload": {"ms": 5}} for key, n in JOBS.items() for i in range(n)]

    def own(starts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """This test's jobs' starts: an earlier test's rate-limited job may still have been
        waiting in the broker's short-wait queues, and arrive in this test's worker."""
        return [s for s in starts if s["id"].split("-")[1:2] == [tag]]

    worker, _ = spawn_worker(celery_app, "short", tmp_path / "logs", concurrency=2, env=env,
                             args=("--include", INCLUDE))
    scheduler = start_scheduler(env)
    try:
        for msg in sent:
            rated_work.apply_async((msg,))
        store = DueStore.open(fresh_pg_url)
        try:
            assert store_rows(store) > 0  # the long key's far jobs wait in the store
            wait_for(lambda: len(own(read_starts(redis_client))) >= 12, 30, "the first starts")
            killed = time.time()
            limit_redis.kill9()  # jobs wait in the workers and the store; Redis loses all
            limit_redis.start()
            restarted = time.time()
            wait_for(lambda: {s["id"] for s in read_starts(redis_client)}
                     >= {m["id"] for m in sent}, 90, "every job's start after the restart")
            wait_until_empty(store, 60)
        finally:
            store.close()
        assert limit_redis.client.exists(keys.rate_limit(settings().key_prefix,
                                                          f"long-{tag}"))  # limits resumed
    finally:
        worker.stop()
    starts = own(read_starts(redis_client))
    assert Counter(s["id"] for s in starts) == Counter(m["id"] for m in sent)  # once each
    before = [s for s in starts if s["t"] < restarted + 1.0]
    after = [s for s in starts if s["t"] >= restarted]
    # Across the restart a key's old and new states may each allow rate + burst.
    assert window_violations(before, rate=2 * RATE, burst=BURST) == {}
    assert window_violations(after) == {}  # from the restart on: the limit, whole again
    assert window_violations([s for s in starts if s["t"] < killed]) == {}
    logs = worker.log() + scheduler.log()
    assert logs.count("Traceback") == 0, logs[-3000:]


def store_rows(store: DueStore) -> int:
    from datetime import UTC, datetime

    return sum(b.scheduled + b.dispatched for b in store.stats(datetime.now(UTC)).values())
