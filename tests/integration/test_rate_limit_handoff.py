"""The limit asked at hand-off (tasks/flow/handoff.py): many calls in one round trip
against the real Redis, what a batch does when a call, the script or Redis fails, a
late start's place in its key's line, and the mark a pool process trusts."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
import redis

from config import keys
from routing.redis_client import GCRA
from tasks.flow import handoff_mark, parse_rate
from tasks.flow.limiter import forgiven_lateness, take, take_args, take_many

pytestmark = pytest.mark.services
RATE = parse_rate("5/s", 1)


@pytest.fixture
def prefix(redis_client: redis.Redis) -> Iterator[str]:
    prefix = f"recur-handoff-{uuid.uuid4().hex[:8]}"
    yield prefix
    for key in redis_client.scan_iter(match=f"{prefix}:*"):
        redis_client.delete(key)


def calls(prefix: str, jobs: list[tuple[str, str]]) -> list[tuple[object, ...]]:
    return [take_args(prefix, key, job, "short", RATE, mode="handoff") for key, job in jobs]


def test_a_batch_answers_each_call_in_order_as_one_call_would(
        redis_client: redis.Redis, prefix: str) -> None:
    got = take_many(redis_client, calls(prefix, [("a", "a0"), ("a", "a1"), ("b", "b0"),
                                                 ("a", "a2")]))
    assert [d is not None and d.allowed for d in got] == [True, False, True, False]
    a1, a2 = got[1], got[3]
    assert a1 is not None and a2 is not None
    assert a1.reserved and a2.reserved
    assert a2.wait - a1.wait == pytest.approx(0.2, abs=0.01)  # slots in the batch's order
    # The reservations are a delivery's: the copy that comes early is sent back again.
    again = take(redis_client, prefix, "a", "a1", "short", RATE)
    assert not again.allowed and not again.reserved


def test_a_call_that_fails_is_none_and_the_others_are_still_answered(
        redis_client: redis.Redis, prefix: str) -> None:
    redis_client.set(keys.rate_limit(prefix, "broken"), "not a hash")  # WRONGTYPE
    got = take_many(redis_client, calls(prefix, [("a", "a0"), ("broken", "x"), ("c", "c0")]))
    assert got[1] is None
    assert got[0] is not None and got[0].allowed
    assert got[2] is not None and got[2].allowed
    # The connection is still in step: the next call gets its own answer.
    assert not take(redis_client, prefix, "a", "a1", "short", RATE).allowed


def test_a_script_redis_lost_makes_a_batch_unanswered_and_the_next_one_answered(
        redis_client: redis.Redis, prefix: str) -> None:
    real = GCRA.sha
    GCRA.sha = "0" * 40  # what Redis answers after a restart: NOSCRIPT
    try:
        assert take_many(redis_client, calls(prefix, [("a", "a0"), ("b", "b0")])) == [
            None, None]
        assert GCRA.sha == real  # loaded once the batch's replies were read
        got = take_many(redis_client, calls(prefix, [("a", "a0")]))
        assert got[0] is not None and got[0].allowed
    finally:
        GCRA.sha = real


def test_redis_gone_leaves_every_call_unanswered_without_raising(prefix: str) -> None:
    gone = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=1)
    assert take_many(gone, calls(prefix, [("a", "a0"), ("a", "a1")])) == [None, None]


def test_a_late_start_waits_for_the_next_slot_first_in_its_line(
        redis_client: redis.Redis, prefix: str) -> None:
    """A job allowed at hand-off that reached its pool process too late is charged again
    at its real start: refused while the key started less than an interval ago, given
    the next slot, and put back at the head of the line, so the job placed after it
    still waits for it."""
    for job in ("a", "b"):
        take(redis_client, prefix, "k", job, "short", RATE, mode="submit")
    assert take(redis_client, prefix, "k", "a", "short", RATE, mode="handoff").allowed
    late = take(redis_client, prefix, "k", "a", "short", RATE, mode="late")
    assert not late.allowed and late.reserved
    assert late.wait == pytest.approx(0.2, abs=0.03)
    line = keys.rate_limit(prefix, "k") + ":line"
    assert redis_client.zrange(line, 0, -1) == ["a", "b"]
    time.sleep(late.wait + 0.01)
    assert not take(redis_client, prefix, "k", "b", "short", RATE).allowed  # behind a
    assert take(redis_client, prefix, "k", "a", "short", RATE).allowed
    assert redis_client.zrange(line, 0, -1) == ["b"]


def test_only_this_workers_fresh_mark_lets_a_job_start_without_asking() -> None:
    def request(value: object) -> SimpleNamespace:
        return SimpleNamespace(**{handoff_mark.HEADER: value})

    now = time.time()
    assert handoff_mark.state(request(handoff_mark.mark(now)), RATE) == "fresh"
    stale = now - forgiven_lateness(RATE) - 0.05
    assert handoff_mark.state(request(handoff_mark.mark(stale)), RATE) == "late"
    forged = f"{'0' * 32}:{now!r}"  # a publisher's header: not this worker's secret
    for value in (forged, "garbage", f"{handoff_mark.SECRET}:soon", None, 7):
        assert handoff_mark.state(request(value), RATE) is None
    assert handoff_mark.state(SimpleNamespace(), RATE) is None
