"""The lock's Lua scripts against the real Redis: ownership, order, handover,
gaps, duplicates and the memory they leave behind."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from tasks.distlock.store import ACQUIRED, DUPLICATE, PARKED, LockStore, new_token
from tasks.processes import wait_for

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


def take(store: LockStore, user: str, seq: int, epoch: str, i: int, handover: str = "",
         gap: float = GAP) -> Any:
    return store.acquire(user, new_token(), TTL, seq, epoch, job(i), handover, gap)


def user_keys(store: LockStore, user: str) -> list[str]:
    return [k for k in store.user_keys(user)[:4] if store.client.exists(k)]


def test_release_with_a_wrong_or_expired_token_is_refused(store: LockStore) -> None:
    seq, epoch = store.submit("u1")
    old = new_token()
    assert store.acquire("u1", old, 0.2, seq, epoch, job(1), "", GAP).status == ACQUIRED
    assert store.release("u1", new_token(), seq, "done", TTL, GAP) == (False, None)
    assert store.holder("u1") == old
    assert not store.extend("u1", new_token(), TTL)
    wait_for(lambda: store.holder("u1") is None, 5, "the short lease to expire")
    # The lease expired and the same job (redelivered) took the lock again.
    current = new_token()
    assert store.acquire("u1", current, TTL, seq, epoch, job(1), "", GAP).status == ACQUIRED
    assert store.release("u1", old, seq, "done", TTL, GAP) == (False, None)
    assert not store.extend("u1", old, TTL)
    assert store.holder("u1") == current
    assert store.stats()["refused"] == 2
    assert store.release("u1", current, seq, "done", TTL, GAP) == (True, None)
    assert store.holder("u1") is None


def test_busy_jobs_park_and_are_handed_over_in_order(store: LockStore) -> None:
    tickets = [store.submit("u") for _ in range(4)]
    epoch = tickets[0][1]
    assert [s for s, _ in tickets] == [1, 2, 3, 4]
    # Job 3 arrives before job 1: it must not start first.
    assert take(store, "u", 3, epoch, 3).status == PARKED
    first = new_token()
    got = store.acquire("u", first, TTL, 1, epoch, job(1), "", GAP)
    assert (got.status, got.seq) == (ACQUIRED, 1)
    assert take(store, "u", 2, epoch, 2).status == PARKED  # busy
    assert take(store, "u", 4, epoch, 4).status == PARKED
    released, handover = store.release("u", first, 1, "done", TTL, GAP)
    assert released and handover is not None and (handover.seq, handover.job) == (2, job(2))
    # The lock is reserved for job 2: nobody else gets it, job 2 with its token does.
    assert store.holder("u") == handover.token
    fences = [got.fence]
    for i in (2, 3, 4):
        assert handover is not None and handover.seq == i
        token = new_token()
        got = store.acquire("u", token, TTL, i, epoch, job(i), handover.token, GAP)
        assert (got.status, got.seq) == (ACQUIRED, i)
        fences.append(got.fence)
        _, handover = store.release("u", token, i, "done", TTL, GAP)
    assert handover is None
    assert fences == sorted(fences) and len(set(fences)) == 4
    assert user_keys(store, "u") == []  # an idle user leaves nothing behind
    assert store.stats()["busy"] == 2 and store.stats()["early"] == 1


def test_a_finished_job_delivered_again_is_a_duplicate(store: LockStore) -> None:
    seq, epoch = store.submit("u")
    store.submit("u")  # a second job keeps the user's state alive
    token = new_token()
    assert store.acquire("u", token, TTL, seq, epoch, job(1), "", GAP).status == ACQUIRED
    store.release("u", token, seq, "done", TTL, GAP)
    assert take(store, "u", seq, epoch, 1).status == DUPLICATE


def test_a_failed_job_may_come_back_and_a_retried_one_keeps_its_place(store: LockStore) -> None:
    (s1, epoch), (s2, _), (s3, _) = (store.submit("u") for _ in range(3))
    token = new_token()
    take_ = store.acquire("u", token, TTL, s1, epoch, job(1), "", GAP)
    assert take_.status == ACQUIRED
    assert take(store, "u", s2, epoch, 2).status == PARKED
    # Job 1 fails for good (dead-lettered): job 2 goes next, job 1 may be replayed.
    _, handover = store.release("u", token, s1, "failed", TTL, GAP)
    assert handover is not None and handover.seq == s2
    token = new_token()
    assert store.acquire("u", token, TTL, s2, epoch, job(2), handover.token,
                         GAP).status == ACQUIRED
    assert take(store, "u", s3, epoch, 3).status == PARKED
    # Job 2 asks for a Celery retry: job 3 must wait for the retried job 2.
    assert store.release("u", token, s2, "retry", TTL, GAP) == (True, None)
    assert take(store, "u", s3, epoch, 3).status == PARKED
    token = new_token()
    assert store.acquire("u", token, TTL, s2, epoch, job(2), "", GAP).status == ACQUIRED
    _, handover = store.release("u", token, s2, "done", TTL, GAP)
    assert handover is not None and handover.seq == s3
    # The replayed job 1 is not a duplicate: it runs (after job 3 holds the lock).
    assert take(store, "u", s1, epoch, 1).status == PARKED


def test_expired_holder_is_reaped_and_parked_job_handed_over(store: LockStore) -> None:
    seq, epoch = store.submit("u")
    s2, _ = store.submit("u")
    store.acquire("u", new_token(), 0.3, seq, epoch, job(1), "", GAP)  # holder dies
    assert take(store, "u", s2, epoch, 2).status == PARKED
    assert store.wake("u", TTL, GAP) is None  # still held: nothing yet
    wait_for(lambda: "u" in store.due_users(), 5, "the user's wake time")
    handover = store.wake("u", TTL, GAP)
    # Job 1 never finished: job 2 waits for it (it will be redelivered) until the gap timeout.
    assert handover is None


def test_parked_jobs_stop_waiting_for_a_job_that_never_comes(store: LockStore) -> None:
    (_, epoch), (s2, _) = store.submit("u"), store.submit("u")  # job 1 is lost
    assert take(store, "u", s2, epoch, 2, gap=0.3).status == PARKED
    wait_for(lambda: "u" in store.due_users(), 5, "the gap deadline")
    handover = store.wake("u", TTL, 0.3)
    assert handover is not None and handover.seq == s2
    assert store.stats()["gap_skips"] == 1
    token = new_token()
    assert store.acquire("u", token, TTL, s2, epoch, job(2), handover.token,
                         0.3).status == ACQUIRED
    store.release("u", token, s2, "done", TTL, 0.3)
    # The lost job turns up late after all: it runs rather than being dropped.
    assert take(store, "u", 1, epoch, 1).status == ACQUIRED


def test_an_unnumbered_job_takes_its_place_on_arrival(store: LockStore) -> None:
    got = take(store, "v", 0, "", 1)
    assert (got.status, got.seq) == (ACQUIRED, 1)
    assert take(store, "v", 0, "", 2).status == PARKED
