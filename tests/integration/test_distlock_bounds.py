"""The lock's bounds and its refusal of a number never given out, against the real
Redis (tasks/distlock/lock.lua): no worker, every answer checked."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from config.errors import LockLineFull
from tasks.distlock.store import (
    ACQUIRED,
    NOT_NUMBERED,
    PARK_FULL,
    PARKED,
    LockStore,
    new_token,
)

pytestmark = pytest.mark.services

TTL, GAP = 5.0, 60.0


@pytest.fixture
def store(redis_client: redis.Redis) -> Iterator[LockStore]:
    prefix = f"recur-bounds-{uuid.uuid4().hex[:8]}"
    yield LockStore(redis_client, prefix, cap=3)
    for key in redis_client.scan_iter(match=f"{prefix}:*"):
        redis_client.delete(key)


def take(store: LockStore, user: str, seq: int, i: int, token: str = "") -> Any:
    return store.acquire(user, token or new_token(), TTL, seq, f"t{i}", f'{{"id":"j{i}"}}', GAP)


def snapshot(store: LockStore, user: str) -> dict[str, Any]:
    client = store.client
    return {key: client.dump(key) for key in store.user_keys(user)}


def test_a_number_above_the_counter_is_refused_and_changes_nothing(store: LockStore) -> None:
    s1, s2 = store.submit("u"), store.submit("u")
    before = snapshot(store, "u")
    for forged in (s2 + 1, s2 + 10**6, 2**62, 10**30):
        assert take(store, "u", forged, 99).status == NOT_NUMBERED
    assert snapshot(store, "u") == before
    assert store.stats().get("forged") == 4
    # The user's real jobs still run, in order: none is dropped as a "duplicate".
    holder = new_token()
    assert take(store, "u", s1, 1, holder).status == ACQUIRED
    assert take(store, "u", s2, 2).status == PARKED
    _, handover = store.release("u", holder, s1, "done", TTL, GAP, take=True)
    assert handover is not None and handover.seq == s2


def test_after_redis_lost_every_number_a_numbered_job_runs_and_numbers_stay_unique(
        store: LockStore) -> None:
    """A Redis restarted without AOF has no counter: the jobs numbered before are real,
    not forged. The first one back restores the counter above its number."""
    s1, s2 = store.submit("u"), store.submit("u")
    for key in store.client.scan_iter(match=f"{store.prefix}:*"):
        store.client.delete(key)
    holder = new_token()
    assert take(store, "u", s1, 1, holder).status == ACQUIRED
    assert take(store, "u", s2, 2).status == PARKED  # at or below the restored counter
    assert store.submit("v") > s2  # later numbers never repeat the lost ones
    assert store.stats().get("counter_restored", 0) >= 1 and not store.stats().get("forged")


def test_submit_refuses_a_user_whose_line_is_full_until_a_job_finishes(
        store: LockStore) -> None:
    seqs = [store.submit("u") for _ in range(4)]  # one to run, three to wait
    with pytest.raises(LockLineFull, match=r"'u' already has 3 jobs.*RECUR_LOCK_MAX_PARKED=3"):
        store.submit("u")
    assert store.submit("other") > seqs[-1]  # the cap is per user
    holder = new_token()
    assert take(store, "u", seqs[0], 0, holder).status == ACQUIRED
    store.release("u", holder, seqs[0], "done", TTL, GAP)
    assert store.submit("u") > seqs[-1]


def test_a_job_that_would_park_beyond_the_cap_is_not_parked(store: LockStore) -> None:
    seqs = [store.submit("u") for _ in range(3)]
    holder = new_token()
    assert take(store, "u", seqs[0], 0, holder).status == ACQUIRED
    assert take(store, "u", seqs[1], 1).status == PARKED
    assert take(store, "u", seqs[2], 2).status == PARKED
    # Jobs numbered on arrival (published with an eta) bypass the submit cap: the
    # parked set still holds at most 3; a copy of a parked job is still "parked".
    assert [take(store, "u", 0, 10 + i).status for i in range(2)] == [PARKED, PARK_FULL]
    assert store.client.zcard(store.user_keys("u")[3]) == 3
    assert take(store, "u", seqs[1], 1).status == PARKED
    assert store.stats().get("park_full") == 1
    # The refused job kept its number (by task id): it runs in its place later.
    assert take(store, "u", 0, 11).seq > seqs[-1]
