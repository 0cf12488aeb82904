"""The per-user lock in real worker processes: one job per user at a time, in
submission order, exactly once; the watchdog; a killed holder."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
import redis
from kombu import Connection

from config import keys
from routing.broker import queue_depth
from tasks.distlock.runtime import runtime
from tests.support.distlock_checks import (
    INCLUDE,
    assert_one_at_a_time_in_order,
    ended,
    message,
    runs_by_user,
    submit_interleaved,
)
from tests.support.locked_tasks import locked_fail, locked_work, read_runs
from tests.support.processes import wait_for

pytestmark = pytest.mark.services

#: Seconds past the TTL within which a killed holder's user must run again: the
#: reaper interval (0.5 s), the broker's redelivery and a loaded 2-core machine.
MARGIN = 2.5

@pytest.mark.parametrize(("chain", "users", "jobs"), [("5", 50, 40), ("0", 10, 20)],
                         ids=["run-by-releaser", "through-broker"])
def test_users_run_one_job_at_a_time_in_submission_order(broker: Connection, start_worker: Any,
                                                         redis_client: redis.Redis,
                                                         chain: str, users: int,
                                                         jobs: int) -> None:
    """4 worker processes; parked jobs run by the releasing process (the default)
    or, with RECUR_LOCK_CHAIN_SECONDS=0, all handed over through the broker."""
    for _ in range(2):
        start_worker("short", concurrency=2, env={"RECUR_LOCK_CHAIN_SECONDS": chain},
                     args=INCLUDE)
    before = runtime().store.stats()  # the run's counters: earlier tests' (kills) count too
    submitted = submit_interleaved(users, jobs, f"order{chain}", ms=3)
    ids = {i for line in submitted.values() for i in line}
    wait_for(lambda: ended(redis_client, ids) == ids, 90, f"all {len(ids)} jobs to finish",
             interval=0.5)
    by_user = runs_by_user(redis_client, set(submitted))
    for user, order in submitted.items():
        assert_one_at_a_time_in_order(by_user[user], order)
    after = runtime().store.stats()
    stats = {k: v - before.get(k, 0) for k, v in after.items()}
    assert stats["busy"] + stats.get("early", 0) > 0, "the test made no contention"
    assert stats.get("duplicates", 0) == 0 and stats.get("gap_skips", 0) == 0
    # Idle users leave only their watermark, which expires after the wait budget.
    store = runtime().store
    left = [k for user in submitted for k in store.user_keys(user)
            if redis_client.exists(k) and not k.endswith(":mark")]
    waking = set(redis_client.zrange(keys.lock_wake(store.prefix), 0, -1))
    assert left == [] and not waking & set(submitted)  # (earlier tests' users may wait)


def test_a_task_longer_than_the_ttl_keeps_its_lock(broker: Connection, start_worker: Any,
                                                   redis_client: redis.Redis) -> None:
    env = {"RECUR_LOCK_TTL": "1"}
    start_worker("short", concurrency=2, env=env, args=INCLUDE)
    child, _ = start_worker("short", concurrency=2, env=env, args=INCLUDE)
    user = "watchdog-u"
    locked_work.delay(message(user, 0, ms=2500))
    for i in range(1, 4):
        locked_work.delay(message(user, i, ms=5))
    ids = {f"{user}-{i}" for i in range(4)}
    wait_for(lambda: ended(redis_client, ids) == ids, 30, "the long job and the ones after it")
    runs = runs_by_user(redis_client, {user})[user]
    assert_one_at_a_time_in_order(runs, [f"{user}-{i}" for i in range(4)])
    assert runs[1]["t"] - runs[0]["t"] > 2.0  # it ran over two TTLs, holding the lock
    assert "lost by its holder" not in child.log()


def test_killed_holder_frees_its_user_and_its_job_runs_again(
        broker: Connection, start_worker: Any, redis_client: redis.Redis) -> None:
    ttl = 3.0
    env = {"RECUR_LOCK_TTL": str(ttl)}
    workers = [start_worker("short", concurrency=1, env=env, args=INCLUDE)[0]
               for _ in range(2)]
    user = "killed-u"
    locked_work.delay(message(user, 0, ms=60_000, again_ms=5))
    for i in range(1, 3):
        locked_work.delay(message(user, i, ms=5))

    def first_start() -> dict[str, Any] | None:
        return next((e for e in read_runs(redis_client) if e["id"] == f"{user}-0"), None)

    wait_for(lambda: first_start() is not None, 20, "the long job to start")
    holder = next(w for w in workers if w.pid == os.getpgid(first_start()["pid"]))  # type: ignore[index]
    holder.kill9()
    killed_at = time.time()
    ids = {f"{user}-{i}" for i in range(3)}
    wait_for(lambda: ended(redis_client, ids) == ids, 30, "the user's jobs after the kill")
    runs = runs_by_user(redis_client, {user})[user]
    restart = runs[1]
    assert (restart["ev"], restart["id"], restart["attempt"]) == ("start", f"{user}-0", 2)
    assert restart["t"] - killed_at < ttl + MARGIN, "the user stayed locked past TTL + margin"
    assert_one_at_a_time_in_order(runs[1:], [f"{user}-{i}" for i in range(3)])


def test_a_parked_job_whose_runner_is_killed_is_handed_over_again(
        broker: Connection, start_worker: Any, redis_client: redis.Redis) -> None:
    """Job 1 parks behind job 0 and is then run by job 0's process (its broker
    message is long acknowledged); killing that process must not lose it."""
    ttl = 3.0
    env = {"RECUR_LOCK_TTL": str(ttl)}
    workers = [start_worker("short", concurrency=1, env=env, args=INCLUDE)[0]
               for _ in range(2)]
    user = "chain-killed-u"
    locked_work.delay(message(user, 0, ms=1500))
    locked_work.delay(message(user, 1, ms=60_000, again_ms=5))
    locked_work.delay(message(user, 2, ms=5))

    def started(job: str) -> dict[str, Any] | None:
        return next((e for e in read_runs(redis_client) if e["id"] == f"{user}-{job}"), None)

    wait_for(lambda: started("1") is not None, 20, "job 1 to start after job 0")
    first, second = started("0"), started("1")
    assert first is not None and second is not None
    assert first["pid"] == second["pid"], "job 1 was not run by job 0's process"
    holder = next(w for w in workers if w.pid == os.getpgid(second["pid"]))
    holder.kill9()
    killed_at = time.time()
    ids = {f"{user}-{i}" for i in range(3)}
    wait_for(lambda: ended(redis_client, ids) == ids, 30, "the user's jobs after the kill")
    runs = runs_by_user(redis_client, {user})[user]
    assert runs[3]["ev"] == "start" and runs[3]["attempt"] == 2
    assert runs[3]["t"] - killed_at < ttl + MARGIN, "the parked job stayed stranded"
    assert_one_at_a_time_in_order(runs[:2] + runs[3:], [f"{user}-{i}" for i in range(3)])


def test_a_failing_job_run_by_the_releaser_fails_through_the_broker_once_more(
        broker: Connection, start_worker: Any, redis_client: redis.Redis) -> None:
    """Job 1 fails when job 0's process runs it: it runs once more as a broker
    message, whose failure dead-letters it, and job 2 still runs after it."""
    for _ in range(2):
        start_worker("short", concurrency=1, args=INCLUDE)
    user = "fail-u"
    locked_work.delay(message(user, 0, ms=1000))
    locked_fail.delay(message(user, 1))
    locked_work.delay(message(user, 2, ms=5))
    wait_for(lambda: queue_depth(broker, "short.dead") == 1, 30, "job 1 dead-lettered")
    wait_for(lambda: ended(redis_client, {f"{user}-2"}) == {f"{user}-2"}, 30, "job 2 to run")
    runs = runs_by_user(redis_client, {user})[user]
    assert [(e["id"], e["attempt"]) for e in runs if e["ev"] == "start"] == [
        (f"{user}-0", 1), (f"{user}-1", 1), (f"{user}-1", 2), (f"{user}-2", 1)]
    assert runs[0]["pid"] == runs[2]["pid"], "job 1 was not first run by job 0's process"


def test_the_releaser_goes_on_running_the_users_jobs_whatever_the_backlog(
        broker: Connection, start_worker: Any, redis_client: redis.Redis) -> None:
    """With hundreds of other messages ready, the releasing process keeps running
    the busy user's jobs itself: the next one starts right after the previous one
    (no trip through the backlog) and nothing goes through the broker."""
    start_worker("short", concurrency=2, args=INCLUDE)
    user = "chain-u"
    order = [f"{user}-{i}" for i in range(30)]
    published = runtime().store.stats().get("published", 0)  # earlier tests' handovers
    for i in range(30):
        locked_work.delay(message(user, i, ms=20))
    for i in range(600):  # the backlog, behind the user's jobs
        locked_work.delay(message(f"backlog-{i}", 0, ms=20))
    wait_for(lambda: ended(redis_client, set(order)) == set(order), 60, "the user's 30 jobs")
    runs = runs_by_user(redis_client, {user})[user]
    assert_one_at_a_time_in_order(runs, order)
    gaps = [b["t"] - a["t"] for a, b in zip(runs[1::2], runs[2::2], strict=False)]
    assert max(gaps) < 0.5, f"a handover waited {max(gaps):.2f}s"
    assert runtime().store.stats().get("published", 0) == published  # never the broker
    assert queue_depth(broker, "short") > 0, "the backlog was gone before the user finished"


@pytest.mark.parametrize("raised", ["SystemExit", "MemoryError"])
def test_a_chained_job_that_raises_no_exception_fails_alone(
        broker: Connection, start_worker: Any, redis_client: redis.Redis, raised: str) -> None:
    """A parked job run by the process that released the lock (the chain) raising what
    is no Exception is that job's failure: run once more through the broker at once,
    while the job before it, which succeeded, is not failed nor run again."""
    child, _ = start_worker("short", concurrency=2, args=INCLUDE)
    user = f"chain-exit-{raised}"
    first = locked_work.delay(message(user, 0, ms=800))
    wait_for(lambda: any(r["id"] == f"{user}-0" for r in read_runs(redis_client)), 20,
             "the first job to hold the lock")
    locked_work.delay(message(user, 1, exit_first=raised))  # parked, then chained
    locked_work.delay(message(user, 2))

    def ends(i: int) -> int:
        return sum(1 for r in read_runs(redis_client) if r["id"] == f"{user}-{i}" and
                   r["ev"] == "end")

    # Well within the lock's 30 s TTL: a lock left held would wait for it.
    wait_for(lambda: ends(1) == 2 and ends(2) == 1, 20, "the failed job's second run")
    runs = runs_by_user(redis_client, {user})[user]
    starts = [r["id"] for r in runs if r["ev"] == "start"]
    assert starts == [f"{user}-{i}" for i in (0, 1, 1, 2)]
    assert_one_at_a_time_in_order(runs, starts)
    assert runs[0]["pid"] == runs[2]["pid"]  # the chain ran it, in the first job's process
    assert runtime().store.holder(user) is None
    wait_for(lambda: f"[{first.id}] succeeded" in child.log(), 10, "the first job's success")
