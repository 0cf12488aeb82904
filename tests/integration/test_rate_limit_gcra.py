"""gcra.lua against the real Redis: bursts, even spacing, reserve-on-refusal in order,
early and late copies, places taken when a job is published, the counters, and the
key's expiry."""

from __future__ import annotations

import itertools
import os
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis

from config import keys
from tasks.flow import counters, parse_rate
from tasks.flow.limiter import OWN_CONNECTIONS, Decision, all_counts, own_connections, pack, take
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


def submit(client: redis.Redis, prefix: str, job: str, rate: str = "5/s",
           key: str = "k") -> Decision:
    return take(client, prefix, key, job, "short", parse_rate(rate, 1), mode="submit")


def test_publishing_takes_places_in_order_and_the_jobs_start_at_them(
        redis_client: redis.Redis, prefix: str) -> None:
    """Mode submit: the first job's place is now, the next ones get slots an interval
    apart in publication order; on arrival each starts at its place, no new slot."""
    placed = [submit(redis_client, prefix, f"j{i}") for i in range(4)]
    assert placed[0].allowed and not any(d.allowed for d in placed[1:])
    for earlier, later in itertools.pairwise(placed[1:]):
        assert later.wait - earlier.wait == pytest.approx(0.2, abs=0.005)
    assert ask(redis_client, prefix, "j0", rate="5/s").allowed  # its place was now
    j0_started = time.monotonic()
    early = ask(redis_client, prefix, "j1", rate="5/s")  # before its slot: not a new one
    assert not early.allowed and not early.reserved and early.wait <= placed[1].wait
    assert submit(redis_client, prefix, "j2").wait <= placed[2].wait  # published again
    time.sleep(placed[1].wait)
    # And an interval after j0 really started (a loaded machine may have asked late).
    time.sleep(max(0.0, j0_started + 0.2 + 0.005 - time.monotonic()))
    assert ask(redis_client, prefix, "j1", rate="5/s").allowed
    # A job delivered without having been published here comes after all of them.
    late = ask(redis_client, prefix, "other", rate="5/s")
    assert not late.allowed and late.wait >= placed[3].wait - placed[1].wait
    counts = all_counts(redis_client, prefix)
    assert counts[("slotted", "short")] == 3 and counts[("busy", "short")] == 2


def test_jobs_placed_now_that_arrive_together_start_an_interval_apart(
        redis_client: redis.Redis, prefix: str) -> None:
    """Two jobs published a while apart (both placed 'now') that reach the workers
    together: the real starts decide, the second gets a slot like a refused job's."""
    assert submit(redis_client, prefix, "a", rate="2/s").allowed
    time.sleep(0.55)
    assert submit(redis_client, prefix, "b", rate="2/s").allowed
    assert ask(redis_client, prefix, "a", rate="2/s").allowed
    second = ask(redis_client, prefix, "b", rate="2/s")
    assert not second.allowed and second.reserved
    assert second.wait == pytest.approx(0.5, abs=0.02)
    assert counters(redis_client, prefix)["short"] == {"deferred": 1, "waiting": 1}
    time.sleep(second.wait)
    assert ask(redis_client, prefix, "b", rate="2/s").allowed
    assert counters(redis_client, prefix)["short"] == {"deferred": 1, "waiting": 0}


def test_a_refusal_the_caller_sleeps_through_is_no_busy_return(
        redis_client: redis.Redis, prefix: str) -> None:
    rate = parse_rate("20/s")  # 50 ms apart
    assert take(redis_client, prefix, "k", "a", "short", rate, near=0.06).allowed
    near = take(redis_client, prefix, "k", "b", "short", rate, near=0.06)
    far = take(redis_client, prefix, "k", "c", "short", rate, near=0.06)
    assert not near.allowed and near.wait <= 0.06 and far.wait > 0.06
    assert all_counts(redis_client, prefix)[("busy", "short")] == 1


def test_a_copy_back_a_moment_late_keeps_its_keys_cadence(
        redis_client: redis.Redis, prefix: str) -> None:
    """A reserved job that starts a little after its slot (its copy came back through
    the broker's wait levels) does not push the key's next job back: with its lateness
    forgiven the next one starts at its own slot; without, it waits that much longer.
    Never before its slot: the first start after a fresh one is still an interval on."""
    rate = parse_rate("5/s")

    def go(key: str, job: str, forgive: float) -> Decision:
        return take(redis_client, prefix, key, job, "short", rate, forgive=forgive)

    for key in ("forgiven", "strict"):
        assert go(key, "a", 0.08).allowed
    slots = {key: [go(key, job, 0.08).wait for job in ("b", "c")]
             for key in ("forgiven", "strict")}
    early = go("forgiven", "b", 0.08)
    assert not early.allowed and early.wait > 0.1  # no start before its slot
    time.sleep(slots["forgiven"][0] + 0.06)  # b 60 ms after its slot
    assert go("forgiven", "b", 0.08).allowed and go("strict", "b", 0.0).allowed
    time.sleep(slots["forgiven"][1] - slots["forgiven"][0] - 0.06)  # c at its slot
    assert go("forgiven", "c", 0.08).allowed
    late = go("strict", "c", 0.0)
    assert not late.allowed and late.wait <= 0.07


def test_a_placed_job_that_comes_before_an_earlier_one_waits_its_turn(
        redis_client: redis.Redis, prefix: str) -> None:
    """The key's line: j2 reaches a worker before j1 (both past their slots, the real
    runs would allow it): it waits behind j1, which then starts, then j2 does."""
    placed = [submit(redis_client, prefix, f"j{i}", rate="20/s") for i in range(3)]
    assert placed[0].allowed and not placed[1].allowed
    time.sleep(placed[2].wait + 0.12)  # every slot has passed; the real runs allow one
    assert ask(redis_client, prefix, "j0", rate="20/s").allowed
    time.sleep(0.06)
    jumped = ask(redis_client, prefix, "j2", rate="20/s")
    assert not jumped.allowed and jumped.wait > 0
    assert ask(redis_client, prefix, "j1", rate="20/s").allowed
    time.sleep(jumped.wait)
    assert ask(redis_client, prefix, "j2", rate="20/s").allowed
    # A job delivered without a place waits behind a placed one, though the runs allow.
    time.sleep(0.06)
    assert submit(redis_client, prefix, "j3", rate="20/s").allowed  # placed now
    fresh = ask(redis_client, prefix, "fresh", rate="20/s")
    assert not fresh.allowed and fresh.reserved
    assert ask(redis_client, prefix, "j3", rate="20/s").allowed


def test_a_first_job_that_never_comes_holds_its_line_only_for_the_grace(
        redis_client: redis.Redis, prefix: str) -> None:
    rate = parse_rate("20/s")
    for job in ("lost", "next"):
        take(redis_client, prefix, "k", job, "short", rate, mode="submit")
    time.sleep(0.1)
    held = take(redis_client, prefix, "k", "next", "short", rate, line_grace=5.0)
    assert not held.allowed  # "lost" (placed first, never delivered) is ahead of it
    time.sleep(0.2)
    assert take(redis_client, prefix, "k", "next", "short", rate, line_grace=0.15).allowed


def test_a_script_redis_does_not_know_is_loaded_and_the_call_answered(
        redis_client: redis.Redis, prefix: str) -> None:
    """The limiter sends its own packed EVALSHA: NOSCRIPT (Redis restarted and lost its
    scripts) must load the script and retry, answering the call."""
    from routing.redis_client import GCRA

    real = GCRA.sha
    GCRA.sha = "0" * 40  # a sha Redis has no script for
    try:
        assert ask(redis_client, prefix, "j0").allowed
        assert GCRA.sha == real
        assert not ask(redis_client, prefix, "j1").allowed
    finally:
        GCRA.sha = real


def _limiter_connections(client: redis.Redis) -> int:
    name = f"recur-limit-{os.getpid()}"
    return sum(1 for c in client.client_list() if c.get("name") == name)


def test_many_threads_share_a_few_connections_and_every_call_is_answered(
        redis_client: redis.Redis, prefix: str) -> None:
    """The io bucket's hundreds of threads: a connection per thread held 200 idle
    connections in one worker; the calls now share at most OWN_CONNECTIONS."""
    threads, calls = 64, 10
    start = threading.Barrier(threads)

    def caller(t: int) -> list[Decision]:
        start.wait()
        return [ask(redis_client, prefix, f"t{t}-{i}", rate="1000/s", burst=1000,
                    key=f"k{t}") for i in range(calls)]

    with ThreadPoolExecutor(threads) as pool:
        answers = list(pool.map(caller, range(threads)))
    assert all(d.allowed for got in answers for d in got)
    assert sum(len(got) for got in answers) == threads * calls
    assert 1 <= _limiter_connections(redis_client) <= OWN_CONNECTIONS


def test_a_call_interrupted_after_sending_leaves_no_reply_for_the_next_call(
        redis_client: redis.Redis, prefix: str) -> None:
    """A call stopped between its command and its reply (KeyboardInterrupt, a time
    limit's exception) must not hand that reply to the next call on the connection."""
    own = own_connections(redis_client)
    with pytest.raises(KeyboardInterrupt), own.held() as conn:
        conn.send_packed_command([pack("EVAL", "return 'stale'", 0)], check_health=False)
        raise KeyboardInterrupt
    for i in range(2 * OWN_CONNECTIONS):  # whichever connection it gets
        got = ask(redis_client, prefix, f"j{i}", rate="1000/s", burst=1000)
        assert isinstance(got, Decision) and got.allowed
