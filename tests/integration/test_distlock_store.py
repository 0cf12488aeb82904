"""The lock's Lua (tasks/distlock/lock.lua) against the real Redis: ownership,
order, handover, gaps, duplicates, forgetting, and the memory left behind."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from config import keys
from tasks.distlock.store import (
    ACQUIRED,
    DUPLICATE,
    PARKED,
    PASSED_OVER,
    TOO_OLD,
    LockStore,
    new_token,
)
from tests.support.processes import wait_for

pytestmark = pytest.mark.services

TTL = 5.0
GAP = 60.0


@pytest.fixture
def store(redis_client: redis.Redis) -> Iterator[LockStore]:
    prefix = f"recur-distlock-{uuid.uuid4().hex[:8]}"
    yield LockStore(redis_client, prefix)
    for key in redis_client.scan_iter(match=f"{prefix}:*"):
        redis_client.delete(key)


def job(i: int) -> str:
    return f'{{"id":"j{i}"}}'


def take(store: LockStore, user: str, seq: int, i: int, token: str = "", gap: float = GAP,
         since: float = 0.0, budget: float = 3600.0) -> Any:
    return store.acquire(user, token or new_token(), TTL, seq, f"t{i}", job(i), gap,
                         since, budget)


def user_keys(store: LockStore, user: str) -> list[str]:
    return [k for k in store.user_keys(user) if store.client.exists(k)]


def test_release_with_a_wrong_or_expired_token_is_refused(store: LockStore) -> None:
    seq = store.submit("u1")
    old = new_token()
    assert store.acquire("u1", old, 0.2, seq, "t1", job(1), GAP).status == ACQUIRED
    assert store.release("u1", new_token(), seq, "done", TTL, GAP) == (False, None)
    assert store.holder("u1") == old
    assert not store.extend("u1", new_token(), TTL)
    wait_for(lambda: store.holder("u1") is None, 5, "the short lease to expire")
    # The lease expired before the job finished: its redelivered copy may run again.
    current = new_token()
    assert take(store, "u1", seq, 1, current).status == ACQUIRED
    assert store.release("u1", old, seq, "done", TTL, GAP) == (False, None)
    assert not store.extend("u1", old, TTL)
    assert store.holder("u1") == current
    assert store.stats()["refused"] == 2
    assert store.release("u1", current, seq, "done", TTL, GAP) == (True, None)
    assert store.holder("u1") is None


def test_busy_jobs_park_and_are_handed_over_in_order(store: LockStore) -> None:
    seqs = [store.submit("u") for _ in range(4)]
    assert seqs == sorted(seqs) and len(set(seqs)) == 4  # one global sequence
    assert take(store, "u", seqs[2], 3).status == PARKED  # arrived before job 1
    first = new_token()
    got = take(store, "u", seqs[0], 1, first)
    assert (got.status, got.seq) == (ACQUIRED, seqs[0])
    assert take(store, "u", seqs[1], 2).status == PARKED  # busy
    assert take(store, "u", seqs[3], 4).status == PARKED
    fences, token = [got.fence], first
    for i in (2, 3, 4):
        # The release takes the lock for the next job in the same call (the chain).
        released, handover = store.release("u", token, seqs[i - 2], "done", TTL, GAP,
                                           take=True)
        assert released and handover is not None
        assert (handover.seq, handover.job) == (seqs[i - 1], job(i))
        assert store.holder("u") == handover.token
        token = handover.token
        fences.append(handover.fence)
    assert store.release("u", token, seqs[3], "done", TTL, GAP, take=True) == (True, None)
    assert fences == sorted(fences) and len(set(fences)) == 4
    # An idle user keeps only its watermark (mark), which expires after the budget.
    assert user_keys(store, "u") == [store.user_keys("u")[1]]
    assert 0 < store.client.pttl(store.user_keys("u")[1]) <= store.keep_ms
    assert store.stats()["busy"] == 2 and store.stats()["early"] == 1


def test_a_handover_through_the_broker_leaves_the_lock_free_for_its_copy(
        store: LockStore) -> None:
    s1, s2, s3 = (store.submit("u") for _ in range(3))
    token = new_token()
    assert take(store, "u", s1, 1, token).status == ACQUIRED
    assert take(store, "u", s2, 2).status == PARKED
    assert take(store, "u", s3, 3).status == PARKED
    _, handover = store.release("u", token, s1, "done", TTL, GAP)
    assert handover is not None and (handover.seq, handover.token) == (s2, "")
    assert store.holder("u") is None
    assert take(store, "u", s3, 3).status == PARKED  # job 3 still waits for job 2
    assert take(store, "u", s2, 2).status == ACQUIRED  # job 2's published copy


def test_a_handover_whose_publish_was_never_confirmed_is_handed_over_again_after_a_lease(
        store: LockStore) -> None:
    """The process that got a broker handover dies before its publish is confirmed: a
    reaper hands the job over again one lease later, not after the gap timeout. Once
    the publish is confirmed, the reaper waits the gap timeout for the copy."""
    s1, s2 = store.submit("u"), store.submit("u")
    token = new_token()
    assert take(store, "u", s1, 1, token).status == ACQUIRED
    assert take(store, "u", s2, 2).status == PARKED
    _, handover = store.release("u", token, s1, "done", 0.3, GAP)  # lease 0.3 s, gap 60 s
    assert handover is not None and handover.seq == s2
    # ... and the process is killed here, before its publish: nothing is published.
    wait_for(lambda: "u" in store.due_users(), 5, "the reaper's look one lease later")
    again = store.wake("u", 0.3, GAP)
    assert again is not None and again.seq == s2
    assert store.published("u", s2, GAP)  # this time the publish was confirmed
    assert "u" not in store.due_users()
    wake_at = store.client.zscore(keys.lock_wake(store.prefix), "u")
    seconds, micros = store.client.time()
    assert wake_at is not None and wake_at - (seconds * 1000 + micros // 1000) > 50_000
    # Its copy arrives and takes the lock: a late confirmation moves nothing.
    copy = new_token()
    assert take(store, "u", s2, 2, copy).status == ACQUIRED
    assert not store.published("u", s2, GAP)


def test_a_finished_job_never_runs_again_even_after_its_user_went_idle(
        store: LockStore) -> None:
    s1 = store.submit("u")
    token = new_token()
    assert take(store, "u", s1, 1, token).status == ACQUIRED
    store.release("u", token, s1, "done", TTL, GAP)
    assert user_keys(store, "u") == [store.user_keys("u")[1]]  # idle: the mark stays
    assert take(store, "u", s1, 1).status == DUPLICATE
    # The user comes back with a new job; an old copy is still refused.
    s2 = store.submit("u")
    token = new_token()
    assert take(store, "u", s2, 2, token).status == ACQUIRED
    assert take(store, "u", s1, 1).status == DUPLICATE
    store.release("u", token, s2, "done", TTL, GAP)
    # Once the mark expired (the budget passed), an old copy is refused as too old.
    store.client.delete(*store.user_keys("u"))
    old = time.time() - 7200
    assert take(store, "u", s2, 2, since=old, budget=3600).status == TOO_OLD
    assert user_keys(store, "u") == []


def test_no_job_starts_after_a_later_one_started(store: LockStore) -> None:
    s1, s2 = store.submit("u"), store.submit("u")
    token = new_token()
    assert take(store, "u", s1, 1, token).status == ACQUIRED
    # Job 1 asks for a Celery retry: job 2 waits for the retried job 1.
    assert store.release("u", token, s1, "retry", TTL, GAP) == (True, None)
    assert take(store, "u", s2, 2).status == PARKED
    token = new_token()
    assert take(store, "u", s1, 1, token).status == ACQUIRED
    _, handover = store.release("u", token, s1, "done", TTL, GAP, take=True)
    assert handover is not None and handover.seq == s2
    # Job 1's copy arriving now (a kill before its ack) is a duplicate.
    assert take(store, "u", s1, 1).status == DUPLICATE
    assert store.release("u", handover.token, s2, "failed", TTL, GAP, "t2") == (True, None)
    assert take(store, "u", s2, 2).status == DUPLICATE  # failed: dead-lettered, done


def test_expired_holder_is_reaped_and_its_own_job_goes_first(store: LockStore) -> None:
    s1, s2 = store.submit("u"), store.submit("u")
    store.acquire("u", new_token(), 0.3, s1, "t1", job(1), GAP)  # holder dies
    assert take(store, "u", s2, 2).status == PARKED
    assert store.wake("u", TTL, GAP) is None  # still held: nothing yet
    wait_for(lambda: "u" in store.due_users(), 5, "the user's wake time")
    # Job 1 never finished: job 2 waits for it (it will be redelivered) until the gap.
    assert store.wake("u", TTL, GAP) is None
    assert take(store, "u", s1, 1).status == ACQUIRED  # its redelivered copy runs again


def test_parked_jobs_stop_waiting_for_a_job_that_never_comes(store: LockStore) -> None:
    s1, s2 = store.submit("u"), store.submit("u")  # job 1 is lost
    assert take(store, "u", s2, 2, gap=0.3).status == PARKED
    wait_for(lambda: "u" in store.due_users(), 5, "the gap deadline")
    handover = store.wake("u", TTL, 0.3)
    assert handover is not None and handover.seq == s2
    assert store.stats()["gap_skips"] == 1
    assert take(store, "u", s2, 2, gap=0.3).status == ACQUIRED
    # The lost job turns up late: it must not run after job 2 started.
    assert take(store, "u", s1, 1).status == PASSED_OVER


def test_an_unnumbered_job_takes_its_place_on_arrival_once(store: LockStore) -> None:
    token = new_token()
    got = take(store, "v", 0, 1, token)
    assert got.status == ACQUIRED
    assert take(store, "v", 0, 2).status == PARKED
    store.release("v", token, got.seq, "done", TTL, GAP, "t1")
    assert take(store, "v", 0, 1).status == DUPLICATE  # its redelivery: known by task id
