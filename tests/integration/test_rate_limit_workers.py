"""@rate_limit with real workers and a real scheduler: one key's jobs start no faster
than its rate in every 1-second window across two worker processes, in the order they
were published, every job runs once, other keys are not held up, and it composes with
@user_lock."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.support.fixtures import spawn_worker
from tests.support.processes import wait_for
from tests.support.rate_tasks import (
    INCLUDE,
    least_span,
    rated_locked_work,
    rated_work,
    read_starts,
    runs_key,
    window_violations,
)
from tests.support.scheduler_support import wait_until_empty, worker_env

pytestmark = pytest.mark.services


def message(key: str, i: int) -> dict[str, Any]:
    return {"id": f"{key}-{i}-{uuid.uuid4().hex[:6]}", "user_id": key, "bucket": "short",
            "payload": {"ms": 5}}


def run_rig(celery_app: Any, store_url: str, tmp_path: Path, start_scheduler: Any) -> Any:
    env = worker_env(store_url)
    worker, _ = spawn_worker(celery_app, "short", tmp_path / "logs", concurrency=2, env=env,
                             args=("--include", INCLUDE))
    start_scheduler(env)
    return worker


@pytest.mark.parametrize("task", [rated_work, rated_locked_work], ids=["alone", "locked"])
def test_one_keys_jobs_start_at_its_rate_and_other_keys_are_not_held_up(
        task: Any, celery_app: Any, fresh_pg_url: str, redis_client: redis.Redis,
        tmp_path: Path, start_scheduler: Any) -> None:
    hot, n_hot = f"hot-{uuid.uuid4().hex[:6]}", 12
    quiet = [f"quiet-{uuid.uuid4().hex[:6]}-{k}" for k in range(6)]
    redis_client.delete(runs_key())
    worker = run_rig(celery_app, fresh_pg_url, tmp_path, start_scheduler)
    try:
        sent = [message(hot, i) for i in range(n_hot)] + [message(q, 0) for q in quiet]
        for msg in sent:
            task.apply_async((msg,))
        own = {m["id"] for m in sent}  # the runs list is shared with other tests' workers
        wait_for(lambda: len({s["id"] for s in read_starts(redis_client)} & own) >= len(sent),
                 60, "every job's start")
        from scheduler.store import DueStore
        store = DueStore.open(fresh_pg_url)
        try:
            wait_until_empty(store, 30)  # every deferred job's row is gone: none left behind
        finally:
            store.close()
    finally:
        worker.stop()
    starts = [s for s in read_starts(redis_client) if s["id"] in own]
    assert Counter(s["id"] for s in starts) == Counter(m["id"] for m in sent)  # each once
    assert window_violations(starts) == {}
    hot_times = sorted(s["t"] for s in starts if s["key"] == hot)
    # Its jobs started in the order they were published, across the two processes.
    hot_order = [s["id"] for s in sorted(starts, key=lambda s: s["t"]) if s["key"] == hot]
    assert hot_order == [m["id"] for m in sent if m["user_id"] == hot]
    assert len({s["pid"] for s in starts}) == 2  # both processes ran jobs
    # n jobs at 5/s with a burst of 1 take at least (n - 1) intervals.
    assert hot_times[-1] - hot_times[0] >= least_span(n_hot)
    first = min(s["t"] for s in starts)
    quiet_times = [s["t"] for s in starts if s["key"] in quiet]
    assert max(quiet_times) - first < 2.0  # not behind the hot key's wait

