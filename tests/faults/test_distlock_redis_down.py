"""The per-user lock when its Redis goes away: fail closed (never run a locked job
unlocked), finish everything when Redis returns, dead-letter past the wait
budget, and run unlocked only when a deployment opts out.

The lock's Redis is a private redis-server on a free port (the shared one
stays up); run records go to the shared Redis.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kombu import Connection

from config.settings import settings
from routing.broker import queue_depth
from tasks.distlock import runtime as lock_runtime
from tasks.distlock.runtime import LeaseKeeper, Runtime
from tasks.distlock.store import LockStore
from tests.support import services
from tests.support.distlock_checks import (
    INCLUDE,
    assert_one_at_a_time_in_order,
    ended,
    message,
    runs_by_user,
    submit_interleaved,
)
from tests.support.locked_tasks import locked_work, read_runs
from tests.support.private_redis import PrivateRedis
from tests.support.processes import Child, wait_for
from tests.support.services import free_port

pytestmark = pytest.mark.services


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    server.start()
    yield server
    server.stop()


def lock_redis_env(url: str, **more: str) -> dict[str, str]:
    """Worker environment: the lock on ``url``; results and run records on the shared Redis."""
    return {"RECUR_REDIS_URL": url, "RECUR_RESULT_BACKEND": services.REDIS_URL,
            "RECURTEST_RECORD_URL": services.REDIS_URL, **more}


@pytest.fixture
def publish_with_lock_redis(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Make this process number the jobs it publishes in the given lock Redis."""
    def use(url: str) -> None:
        cfg = settings()
        store = LockStore(redis.Redis.from_url(url, decode_responses=True,
                                               socket_connect_timeout=1), cfg.key_prefix)
        keeper = LeaseKeeper(store, cfg)
        monkeypatch.setattr(lock_runtime, "_current", Runtime(cfg, store, keeper, os.getpid()))
    return use


def worker_logs(children: list[Child]) -> str:
    return "".join(child.log() for child in children)


def test_jobs_wait_for_redis_and_all_complete_when_it_returns(
        broker: Connection, start_worker: Any, redis_client: redis.Redis,
        private_redis: PrivateRedis, publish_with_lock_redis: Any) -> None:
    publish_with_lock_redis(private_redis.url)
    env = lock_redis_env(private_redis.url)
    workers = [start_worker("short", concurrency=2, env=env, args=INCLUDE)[0] for _ in range(2)]
    submitted = submit_interleaved(8, 15, "down", ms=40)
    ids = {i for jobs in submitted.values() for i in jobs}
    wait_for(lambda: len(ended(redis_client, ids)) >= 15, 30, "some jobs to finish")
    private_redis.stop()
    wait_for(lambda: "not run: lock of user" in worker_logs(workers), 20,
             "a job to be refused while Redis is down")
    done_while_down = len(ended(redis_client, ids))
    private_redis.start()
    wait_for(lambda: ended(redis_client, ids) == ids, 90, "every job after Redis returned",
             interval=0.5)
    assert done_while_down < len(ids)
    by_user = runs_by_user(redis_client, set(submitted))
    for user, order in submitted.items():
        assert_one_at_a_time_in_order(by_user[user], order)


def test_without_redis_a_job_is_dead_lettered_past_its_wait_budget(
        broker: Connection, start_worker: Any, redis_client: redis.Redis, celery_app: Any,
        publish_with_lock_redis: Any) -> None:
    nowhere = f"redis://127.0.0.1:{free_port()}/0"
    publish_with_lock_redis(nowhere)
    child, _ = start_worker("short", env=lock_redis_env(nowhere, RECUR_LOCK_WAIT_BUDGET="3"),
                            args=INCLUDE)
    result = locked_work.delay(message("budget-u", 0))
    wait_for(lambda: queue_depth(broker, "short.dead") == 1, 30,
             "the job in the dead-letter queue")
    assert child.log().count("not run: lock of user budget-u") >= 2
    assert "RECUR_LOCK_WAIT_BUDGET" in str(celery_app.AsyncResult(result.id).result)
    assert not [e for e in read_runs(redis_client) if e["user"] == "budget-u"]


def test_run_unlocked_is_an_explicit_opt_out(broker: Connection, start_worker: Any,
                                             redis_client: redis.Redis,
                                             publish_with_lock_redis: Any) -> None:
    nowhere = f"redis://127.0.0.1:{free_port()}/0"
    publish_with_lock_redis(nowhere)
    child, _ = start_worker("short", args=INCLUDE, env=lock_redis_env(
        nowhere, RECUR_LOCK_WHEN_REDIS_DOWN="run-unlocked"))
    locked_work.delay(message("open-u", 0))
    wait_for(lambda: ended(redis_client, {"open-u-0"}) == {"open-u-0"}, 30, "the job to run")
    assert [e["fence"] for e in read_runs(redis_client) if e["user"] == "open-u"] == [None, None]
    assert "running UNLOCKED" in child.log()
