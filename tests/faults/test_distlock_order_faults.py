"""The per-user lock's two promises under faults, with real workers, a deep backlog
and short leases: a finished job never runs again, and no job starts after a later
job of its user started. Runs record their start and end in a Redis list (written
synchronously, in one global order); kills are recorded by pid and time."""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kombu import Connection

from config import keys
from config.settings import settings
from routing.broker import queue_depth
from tasks.app import app
from tasks.distlock import runtime as lock_runtime
from tasks.distlock.job import SEQ, SINCE
from tasks.distlock.runtime import LeaseKeeper, Runtime
from tasks.distlock.store import LockStore
from tests.support import services
from tests.support.distlock_checks import (
    INCLUDE,
    assert_order_kept_through_faults,
    ended,
    message,
    runs_by_user,
)
from tests.support.locked_tasks import locked_work, read_runs
from tests.support.private_redis import PrivateRedis
from tests.support.processes import Child, wait_for

pytestmark = pytest.mark.services


def pool_children(worker: Child) -> list[int]:
    """The prefork pool processes of a worker's main process."""
    path = Path(f"/proc/{worker.pid}/task/{worker.pid}/children")
    try:
        return [int(pid) for pid in path.read_text().split()]
    except (FileNotFoundError, ProcessLookupError):
        return []


def lock_state(client: redis.Redis, missing: set[str]) -> dict[str, Any]:
    """What the lock's Redis holds for the users of the unfinished jobs (for a failure)."""
    store = lock_runtime.runtime().store
    users = {job.rsplit("-", 1)[0] for job in missing}
    state: dict[str, Any] = {"missing": sorted(missing)[:10], "stats": store.stats()}
    for user in sorted(users)[:3]:
        owner, mark, wait, parked = store.user_keys(user)[:4]
        state[user] = {"owner": client.get(owner), "mark": client.hgetall(mark),
                       "wait": client.zrange(wait, 0, 5),
                       "parked": [j[:90] for j in client.zrange(parked, 0, 3)],
                       "wake": client.zscore(keys.lock_wake(settings().key_prefix), user),
                       "now": client.time()}
    return state


def publish_backlog(hot: str, hot_jobs: int, others: int, jobs: int) -> dict[str, list[str]]:
    """The hot user's jobs spread evenly through every other user's jobs."""
    rng = random.Random(12)
    line = [(f"{hot}-o{u}", j) for u in range(others) for j in range(jobs)]
    rng.shuffle(line)
    # Keep each user's own order, then put the hot user's jobs in at even steps.
    counters: dict[str, int] = {}
    ordered = []
    for user, _ in line:
        ordered.append((user, counters.setdefault(user, 0)))
        counters[user] += 1
    step = len(ordered) // hot_jobs
    for i in range(hot_jobs):
        ordered.insert(i * (step + 1), (hot, i))
    submitted: dict[str, list[str]] = {}
    for user, i in ordered:
        msg = message(user, i, ms=25)
        locked_work.delay(msg)
        submitted.setdefault(user, []).append(msg["id"])
    return submitted


def test_deep_backlog_short_ttl_and_kills_keep_order_and_run_each_job_once(
        broker: Connection, start_worker: Any, redis_client: redis.Redis) -> None:
    """3,150 ready messages (one hot user with 150 jobs among 300 users with 10 each),
    RECUR_LOCK_TTL=3, a pool process or (one time in three) a whole worker kill -9ed
    every ~1.5 s."""
    env = {"RECUR_LOCK_TTL": "3"}
    submitted = publish_backlog("hot", 150, 300, 10)
    ids = {i for line in submitted.values() for i in line}
    assert queue_depth(broker, "short") >= 3000
    workers = [start_worker("short", concurrency=2, env=env, args=INCLUDE)[0]
               for _ in range(3)]
    killed: dict[int, float] = {}
    rng, kills, deadline = random.Random(7), 0, time.monotonic() + 150
    while ended(redis_client, ids) != ids or len(workers) < 3:
        assert time.monotonic() < deadline, \
            f"{len(ids - ended(redis_client, ids))} jobs never finished: " \
            f"{lock_state(redis_client, ids - ended(redis_client, ids))}"
        time.sleep(1.5)
        if kills >= 15 or len(ended(redis_client, ids)) > 0.97 * len(ids):
            continue
        kills += 1
        victim = rng.choice(workers)
        if kills % 3:  # a pool child (the main process restarts it)
            children = pool_children(victim)
            if children:
                pid = rng.choice(children)
                killed[pid] = time.time()
                os.kill(pid, 9)
            continue
        for pid in [victim.pid, *pool_children(victim)]:
            killed[pid] = time.time()
        victim.kill9()
        workers.remove(victim)
        threading.Thread(target=lambda: workers.append(
            start_worker("short", concurrency=2, env=env, args=INCLUDE)[0])).start()
    by_user = runs_by_user(redis_client, set(submitted))
    repeats = sum(assert_order_kept_through_faults(by_user[user], order, killed)
                  for user, order in submitted.items())
    assert queue_depth(broker, "short.dead") == 0
    stats = lock_runtime.runtime().store.stats()
    assert stats.get("busy", 0) + stats.get("early", 0) > 0, "no contention"
    assert kills >= 4, f"only {kills} kills: the run was too short to test anything"
    print(f"kills={kills} repeated runs={repeats} stats={stats}")


def test_old_copies_of_a_forgotten_users_finished_jobs_never_run(
        broker: Connection, start_worker: Any, redis_client: redis.Redis,
        celery_app: Any) -> None:
    """Copies of finished jobs (as a redelivery or a handover would publish them) are
    dropped while the user is remembered, and once its memory is gone (as when it
    expires after the wait budget) they are dead-lettered as too old, never run."""
    budget = 4.0
    env = {"RECUR_LOCK_WAIT_BUDGET": str(budget)}
    start_worker("short", concurrency=2, env=env, args=INCLUDE)
    user, store = "idle-u", lock_runtime.runtime().store
    # Each job as the publish hook numbers it, kept so its copies can be published.
    jobs = [(f"{user}-t{i}", store.submit(user), time.time()) for i in range(3)]

    def publish(since_shift: float = 0.0) -> None:
        for i, (task_id, seq, since) in enumerate(jobs):
            app.send_task("tests.locked_work", args=[message(user, i, ms=3)],
                          task_id=task_id, headers={SEQ: seq, SINCE: since - since_shift})

    publish()
    ids = {f"{user}-{i}" for i in range(3)}
    wait_for(lambda: ended(redis_client, ids) == ids, 30, "the user's jobs")
    mark = store.user_keys(user)[1]
    assert [k for k in store.user_keys(user) if redis_client.exists(k)] == [mark]
    assert 0 < redis_client.pttl(mark) <= (settings().lock_wait_budget + 300) * 1000
    duplicates = store.stats().get("duplicates", 0)
    publish()  # copies while the user is remembered: dropped
    wait_for(lambda: store.stats().get("duplicates", 0) >= duplicates + 3, 30,
             "the copies dropped")
    # The user is forgotten (its memory expired after the budget); old copies are
    # still queued. They are older than the budget by then: refused, not run.
    redis_client.delete(*store.user_keys(user))
    publish(since_shift=budget + 1)
    wait_for(lambda: queue_depth(broker, "short.dead") == 3, 30, "the old copies refused")
    runs = [r for r in read_runs(redis_client) if r["user"] == user]
    assert [r["ev"] for r in runs] == ["start", "end"] * 3, "an old copy ran again"
    assert "RECUR_LOCK_WAIT_BUDGET" in str(celery_app.AsyncResult(jobs[0][0]).result)
    # The user comes back: its new job runs.
    locked_work.delay(message(user, 3, ms=3))
    wait_for(lambda: ended(redis_client, {f"{user}-3"}) == {f"{user}-3"}, 30, "a new job")


@pytest.fixture
def lock_redis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PrivateRedis]:
    """A private lock Redis with AOF; this process numbers jobs in it."""
    server = PrivateRedis(tmp_path)
    server.start()
    cfg = settings()
    store = LockStore(redis.Redis.from_url(server.url, decode_responses=True,
                                           socket_connect_timeout=1), cfg.key_prefix)
    monkeypatch.setattr(lock_runtime, "_current",
                        Runtime(cfg, store, LeaseKeeper(store, cfg), os.getpid()))
    yield server
    server.stop()


def test_a_redis_crash_mid_run_loses_no_parked_job_and_keeps_order(
        broker: Connection, start_worker: Any, redis_client: redis.Redis,
        lock_redis: PrivateRedis) -> None:
    """The lock's Redis (AOF, appendfsync everysec) is kill -9ed while users have jobs
    parked, and restarted: every job runs, once, in order."""
    env = {"RECUR_REDIS_URL": lock_redis.url, "RECUR_RESULT_BACKEND": services.REDIS_URL,
           "RECURTEST_RECORD_URL": services.REDIS_URL}
    for _ in range(2):
        start_worker("short", concurrency=2, env=env, args=INCLUDE)
    submitted: dict[str, list[str]] = {}
    for i in range(120):
        for user in ("crash-hot", f"crash-u{i % 20}"):
            msg = message(user, len(submitted.get(user, [])), ms=20)
            locked_work.delay(msg)
            submitted.setdefault(user, []).append(msg["id"])
    ids = {i for line in submitted.values() for i in line}
    parked = lock_runtime.runtime().store.user_keys("crash-hot")[3]
    wait_for(lambda: lock_redis.client.zcard(parked) > 5, 30, "jobs parked behind the hot user")
    before = lock_redis.client.zcard(parked)
    lock_redis.kill9()
    time.sleep(2)
    lock_redis.start()
    wait_for(lambda: ended(redis_client, ids) == ids, 90, "every job after the restart",
             interval=0.5)
    by_user = runs_by_user(redis_client, set(submitted))
    repeats = sum(assert_order_kept_through_faults(by_user[user], order, {})
                  for user, order in submitted.items())
    assert repeats == 0 and before > 5
