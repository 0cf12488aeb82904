"""gcra.lua against the real Redis: bursts, even spacing, reserve-on-refusal in order,
early and late copies, the counters, and the key's expiry."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from config import keys
from tasks.flow import counters, parse_rate
from tasks.flow.limiter import Decision, take
from tests.support.processes import wait_for

pytestmark = pytest.mark.services


@pytest.fixture
def prefix(redis_client: redis.Redis) -> Iterator[str]:
    prefix = f"recur-rate-{uuid.uuid4().hex[:8]}"
    yield prefix
    for key in redis_client.scan_iter(match=f"{prefix}:*"):
        redis_client.delete(key)


def ask(client: redis.Redis, prefix: str, job: str, rate: str = "10/s", burst: int = 1,
        key: str = "k") -> Decision:
    return take(client, prefix, key, job, "short", parse_rate(rate, burst))


def test_a_burst_starts_at_once_then_refusals_reserve_evenly_spaced_slots_in_order(
        redis_client: redis.Redis, prefix: str) -> None:
    got = [ask(redis_client, prefix, f"j{i}", burst=3) for i in range(7)]
    assert [d.allowed for d in got] == [True] * 3 + [False] * 4
    waits = [d.wait for d in got[3:]]
    # Slots 100 ms apart, in the order the jobs were refused.
    assert waits == sorted(waits)
    for earlier, later in itertools.pairwise(waits):
        assert later - earlier == pytest.approx(0.1, abs=0.005)
    assert waits[0] == pytest.approx(0.1, abs=0.02)
    assert all(d.reserved for d in got[3:])
    assert counters(redis_client, prefix) == {"short": {"deferred": 4, "waiting": 4}}
    # Other keys are not touched.
    assert ask(redis_client, prefix, "x", burst=3, key="other").allowed


def test_a_copy_that_comes_early_waits_for_its_own_slot_and_reserves_nothing_new(
        redis_client: redis.Redis, prefix: str) -> None:
    assert ask(redis_client, prefix, "a", rate="2/s").allowed
    first = ask(redis_client, prefix, "b", rate="2/s")
    assert not first.allowed and first.reserved
    again = ask(redis_client, prefix, "b", rate="2/s")  # a duplicate, or pulled forward
    assert not again.allowed and not again.reserved
    assert again.wait <= first.wait
    later = ask(redis_client, prefix, "c", rate="2/s")
    assert later.wait == pytest.approx(first.wait + 0.5, abs=0.02)  # b kept one slot only
    time.sleep(first.wait)
    on_time = ask(redis_client, prefix, "b", rate="2/s")
    assert on_time.allowed and not on_time.reserved
    assert counters(redis_client, prefix)["short"] == {"deferred": 2, "waiting": 1}


def test_copies_that_come_late_together_do_not_start_together(
        redis_client: redis.Redis, prefix: str) -> None:
    """Jobs whose slots passed while they queued are still spaced by the runs that
    really started: the second waits one interval after the first."""
    assert ask(redis_client, prefix, "a", rate="5/s").allowed
    slots = [ask(redis_client, prefix, j, rate="5/s") for j in ("b", "c")]
    time.sleep(slots[-1].wait + 0.3)  # both slots are past
    assert ask(redis_client, prefix, "b", rate="5/s").allowed
    late = ask(redis_client, prefix, "c", rate="5/s")
    assert not late.allowed and not late.reserved
    assert late.wait == pytest.approx(0.2, abs=0.02)
    time.sleep(late.wait)
    assert ask(redis_client, prefix, "c", rate="5/s").allowed


def test_an_idle_keys_hash_expires(redis_client: redis.Redis, prefix: str) -> None:
    assert ask(redis_client, prefix, "a", rate="100/s").allowed
    ttl = redis_client.pttl(keys.rate_limit(prefix, "k"))
    assert 0 < ttl <= 61_000


def test_a_refusal_without_redis_state_starts_fresh(redis_client: redis.Redis,
                                                     prefix: str) -> None:
    """Redis lost the key (restart without persistence): the next job starts, the
    one after waits an interval; a job whose reservation was lost is served fresh."""
    assert ask(redis_client, prefix, "a", rate="1/s").allowed
    assert not ask(redis_client, prefix, "b", rate="1/s").allowed
    redis_client.delete(keys.rate_limit(prefix, "k"))
    assert ask(redis_client, prefix, "b", rate="1/s").allowed
    assert not ask(redis_client, prefix, "c", rate="1/s").allowed
    wait_for(lambda: ask(redis_client, prefix, "c", rate="1/s").allowed, 3,
             "c's slot, one second on")


def test_the_counters_read_only_the_scripts_fields(redis_client: redis.Redis,
                                                   prefix: str) -> None:
    ask(redis_client, prefix, "j1", rate="1/s")
    ask(redis_client, prefix, "j2", rate="1/s")  # refused: deferred and waiting
    redis_client.hset(keys.rate_stats(prefix), mapping={
        "deferred:long": "lots", "other:short": "5", "waiting:io": "²", "junk": "1"})
    assert counters(redis_client, prefix) == {"short": {"deferred": 1, "waiting": 1}}
