"""Redis state recur did not write (another program's SET/HSET, a PERSIST, garbage
values), against a private redis-server: the key is named, other users go on, a
statistic never stops a job, an orphaned lock lapses, and a parked entry that is no
job is dropped so the jobs after it run. No worker: the store, the reaper and the
scripts are called directly."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from kombu import Connection

from config import keys
from config.errors import ServiceUnavailable
from config.settings import load_settings, settings
from routing.reseq.state import Resequencer
from tasks.distlock import runtime as lock_runtime
from tasks.distlock.broken import LockRefused
from tasks.distlock.chain import run_inline
from tasks.distlock.job import ParkedJob
from tasks.distlock.runtime import Lease, LeaseKeeper, Runtime, publish_handover
from tasks.distlock.store import ACQUIRED, PARKED, LockStore, new_token
from tasks.flow import limiter
from tasks.flow.rates import parse_rate
from tests.support.private_redis import PrivateRedis
from tests.support.processes import wait_for

pytestmark = pytest.mark.services

TTL, GAP = 5.0, 60.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRedis]:
    private = PrivateRedis(Path(tmp_path_factory.mktemp("foreign")))
    private.start()
    yield private
    private.stop()


@pytest.fixture
def client(server: PrivateRedis) -> redis.Redis:
    server.client.flushall()
    return server.client


@pytest.fixture
def rt(client: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> Runtime:
    """This process's lock runtime on the private Redis (the reaper is not started)."""
    cfg = settings()
    store = LockStore(client, cfg.key_prefix)
    current = Runtime(cfg, store, LeaseKeeper(store, cfg), os.getpid())
    monkeypatch.setattr(lock_runtime, "_current", current)
    return current


def job(i: int, task: str = "tests.no_such_task") -> str:
    return ParkedJob(task=task, id=f"j{i}", args=[{"user_id": "u", "id": f"j{i}"}],
                     kwargs={}, since=0.0, headers={}).to_json()


def test_a_key_of_the_wrong_type_is_named_and_other_users_go_on(rt: Runtime) -> None:
    store = rt.store
    store.client.set(store.user_keys("w")[1], "written by another program")
    with pytest.raises(LockRefused, match=r"key \S+:lock:\{w\}:mark is a string, where the "
                       r"lock keeps a hash"):
        store.acquire("w", new_token(), TTL, 0, "t1", job(1), GAP)
    store.client.set(keys.lock_counter(store.prefix), "abc")
    with pytest.raises(LockRefused, match=r"lock:counter holds 'abc', not a whole number"):
        store.submit("ok")
    store.client.delete(keys.lock_counter(store.prefix))
    assert store.acquire("ok", new_token(), TTL, store.submit("ok"), "t2", job(2),
                         GAP).status == ACQUIRED
    store.client.set(keys.rate_limit(store.prefix, "k"), "x")
    with pytest.raises(limiter.LimitRefused, match=r"key \S+:rate:\{k\} is a string, where "
                       r"the limit keeps a hash"):
        limiter.take(store.client, store.prefix, "k", "j1", "b", parse_rate("1/s"))
    store.client.hset(keys.rate_limit(store.prefix, "k2"), "plan", "1e300")
    with pytest.raises(limiter.LimitRefused, match=r"field plan holds '1[^']*e\+?300', not a time"):
        limiter.take(store.client, store.prefix, "k2", "j1", "b", parse_rate("1/s"))


def test_a_counter_overwritten_with_garbage_stops_no_job(rt: Runtime,
                                                         client: redis.Redis) -> None:
    store = rt.store
    client.hset(keys.lock_stats(store.prefix), mapping={"busy": "abc", "handovers": "x"})
    s1, s2 = store.submit("u"), store.submit("u")
    token = new_token()
    assert store.acquire("u", token, TTL, s1, "t1", job(1), GAP).status == ACQUIRED
    assert store.acquire("u", new_token(), TTL, s2, "t2", job(2), GAP).status == PARKED
    _, handover = store.release("u", token, s1, "done", TTL, GAP, take=True)
    assert handover is not None and handover.seq == s2
    assert store.stats()["busy"] == 1  # the counter started again
    # @rate_limit's counters hash is shared by every key of a bucket.
    stats = keys.rate_stats(store.prefix)
    client.hset(stats, mapping={"waiting:b": "abc", "deferred:b": "1e400"})
    rate = parse_rate("1/s")
    assert limiter.take(client, store.prefix, "k", "j1", "b", rate).allowed
    assert not limiter.take(client, store.prefix, "k", "j2", "b", rate).allowed
    # The resequencer's: a send is recorded (not reported as failed after it was made).
    reseq = Resequencer(client, load_settings({**os.environ, "RECUR_KEY_PREFIX": store.prefix}))
    reseq.assign("d", ["m1"])
    client.hset(reseq.key("d", "stats"), "sent", "abc")
    reseq.deposit("d", 1, {"id": "m1", "result": 1})
    assert reseq.acquire("d", "me")
    assert reseq.advance("d", "me", 1) == "ok"


def test_a_lock_left_without_expiry_lapses_after_one_lease(rt: Runtime) -> None:
    """A crashed worker's lock whose TTL was removed (PERSIST) would hold its user's
    jobs forever: the next job to find it gives it one lease."""
    store = rt.store
    s1, s2 = store.submit("u"), store.submit("u")
    assert store.acquire("u", new_token(), 0.3, s1, "t1", job(1), GAP).status == ACQUIRED
    store.client.persist(store.user_keys("u")[0])
    assert store.acquire("u", new_token(), 0.3, s2, "t2", job(2), GAP).status == PARKED
    wait_for(lambda: store.holder("u") is None, 5, "the orphaned lock to lapse")
    assert store.acquire("u", new_token(), 0.3, s1, "t1", job(1), GAP).status == ACQUIRED


def test_a_lock_key_of_another_type_without_expiry_lapses_after_one_lease(
        rt: Runtime, caplog: pytest.LogCaptureFixture) -> None:
    """Another program's hash, list or set at a user's lock key (no TTL) is named once and
    held for one lease, not for ever: the job parks and the reaper hands it over after."""
    store = rt.store
    writes = {"hash": lambda c, k: c.hset(k, "x", "y"), "list": lambda c, k: c.rpush(k, "x"),
              "set": lambda c, k: c.sadd(k, "x")}
    for kind, write in writes.items():
        owner, seq = store.user_keys(kind)[0], store.submit(kind)
        write(store.client, owner)
        with caplog.at_level(logging.ERROR, "recur.distlock"):
            assert store.acquire(kind, new_token(), 0.3, seq, "t1", job(1), GAP).status == PARKED
        assert store.client.type(owner) == kind  # kept, not deleted or overwritten
        assert 0 < store.client.pttl(owner) <= 300
        assert f"key {owner} is a {kind} without an expiry" in caplog.text
        wait_for(lambda k=kind: store.wake(k, 0.3, GAP) is not None, 5,
                 f"the {kind} at the lock key to lapse and the job to be handed over")
    assert store.stats()["lease_restored"] == 3


def test_one_users_broken_keys_hold_up_neither_the_reaper_nor_the_watchdog(
        rt: Runtime, broker: Connection, caplog: pytest.LogCaptureFixture) -> None:
    store, keeper = rt.store, rt.keeper
    s1, s2 = store.submit("good"), store.submit("good")
    token = new_token()
    assert store.acquire("good", token, TTL, s1, "t1", job(1), GAP).status == ACQUIRED
    assert store.acquire("good", new_token(), TTL, s2, "t2", job(2), GAP).status == PARKED
    _, handover = store.release("good", token, s1, "done", 0.2, GAP)  # never published
    assert handover is not None
    store.client.set(store.user_keys("bad")[3], "x")  # bad's parked jobs: not a zset
    store.client.zadd(keys.lock_wake(store.prefix), {"bad": 0})  # due first
    wait_for(lambda: "good" in store.due_users(), 5, "good's look one lease later")
    with caplog.at_level(logging.ERROR, "recur.distlock"):
        keeper.reap()
    assert store.stats()["published"] == 2  # good's job was handed over again
    assert store.due_users() == []  # bad is looked at again after a lease, not now
    assert "lock:{bad}:parked is a string" in caplog.text
    # The watchdog: a lease whose key another program overwrote is lost, the others kept.
    leases = [Lease(user, new_token(), TTL, extended_at=0.0) for user in ("bad", "good")]
    for lease in leases:  # held as Held.run holds them (without starting the threads)
        store.client.set(store.user_keys(lease.user)[0], lease.token)
        keeper._leases[lease.token] = lease
    store.client.delete(store.user_keys("bad")[0])
    store.client.hset(store.user_keys("bad")[0], "x", "y")
    keeper.watch()
    assert [lease.lost for lease in leases] == [True, False]
    assert store.client.pttl(store.user_keys("good")[0]) > 0


def test_a_parked_entry_that_is_no_job_is_dropped_and_the_next_job_goes_on(
        rt: Runtime, broker: Connection, caplog: pytest.LogCaptureFixture) -> None:
    store = rt.store
    parked = store.user_keys("u")[3]
    s1, s2, s3, s4 = (store.submit("u") for _ in range(4))
    token = new_token()
    assert store.acquire("u", token, TTL, s1, "t1", job(1), GAP).status == ACQUIRED
    store.client.zadd(parked, {"not json": s2})
    assert store.acquire("u", new_token(), TTL, s3, "t3", job(3), GAP).status == PARKED
    _, handover = store.release("u", token, s1, "done", TTL, GAP)
    assert handover is not None and handover.job == "not json"
    with caplog.at_level(logging.ERROR, "recur.distlock"):
        publish_handover("u", handover)  # the reaper's way: through the broker
    assert f"dropped entry #{s2} of {parked}: not a parked job" in caplog.text
    assert store.client.zrange(parked, 0, -1) == [job(3)]  # published, parked until it runs
    # The chain's way: the lock is taken for the entry, which is dropped; the next runs.
    assert store.acquire("u", token, TTL, s3, "t3", job(3), GAP).status == ACQUIRED
    store.client.zadd(parked, {'{"id": "no task"}': s4})
    _, handover = store.release("u", token, s3, "done", TTL, GAP, take=True)
    assert handover is not None and handover.token
    assert run_inline(rt, "u", handover, None, TTL, chain=False) is None
    assert store.client.zcard(parked) == 0 and store.holder("u") is None


def test_a_resequencer_position_overwritten_with_garbage_is_named(client: redis.Redis) -> None:
    """The destination waits (its messages kept) and every call says which key is wrong."""
    reseq = Resequencer(client, load_settings(os.environ))
    reseq.assign("d", ["m1"])
    sent = reseq.key("d", "sent")
    client.set(sent, "abc")
    assert reseq.acquire("d", "me")
    for call in (lambda: reseq.deposit("d", 1, {"id": "m1", "result": 1}),
                 lambda: reseq.peek("d"), lambda: reseq.advance("d", "me", 1)):
        with pytest.raises(ServiceUnavailable, match=f"key {re.escape(sent)} holds"):
            call()
    client.set(reseq.key("d", "seq"), "abc")
    with pytest.raises(ServiceUnavailable, match=r"key \S+:reseq:\{d\}:seq holds no sequence"):
        reseq.assign("d", ["m2"])
