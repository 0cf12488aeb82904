"""The dead-letter sweep's store writes (scheduler/store/dead.py), on SQLite and
PostgreSQL: each re-checks the copy's dispatch inside its transaction."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from config.settings import load_settings
from scheduler.store import Claimed, DueStore, Job
from scheduler.store.dead import DeadCopies
from scheduler.wire import Dispatch, micros
from tasks.settle import last_chance

LEASE = timedelta(minutes=30)


def dispatched(store: DueStore, key: str) -> Dispatch:
    """Schedule job ``key`` and dispatch it; the dispatch its copy carries."""
    now = datetime.now(UTC)
    msg = {"id": key, "user_id": "u", "bucket": "short", "payload": None}
    store.schedule([Job(key, "tests.count_run", "short",
                        json.dumps({"args": [msg], "kwargs": {}}), now)], now)
    sent: list[Claimed] = []
    assert store.dispatch("short", 10, now, now + LEASE, sent.extend) == 1
    return Dispatch(key, sent[0].token, micros(sent[0].lease_until))


def test_a_never_run_copys_job_is_due_now_once(store: DueStore) -> None:
    copy = dispatched(store, "job-a")
    dead = DeadCopies(store)
    assert dead.rows(["job-a", "nope"])["job-a"].is_live(copy)
    assert dead.dispatch_again(copy, datetime.now(UTC)) == "short"
    assert dead.dispatch_again(copy, datetime.now(UTC)) is None  # moved on: left alone
    assert not dead.rows(["job-a"])["job-a"].is_live(copy)
    again: list[Claimed] = []
    now = datetime.now(UTC)
    assert store.dispatch("short", 10, now, now + LEASE, again.extend) == 1
    assert again[0].token == copy.token + 1  # the dead copy is stale now


def test_a_moved_lease_is_not_dispatched_again_but_buried(store: DueStore) -> None:
    copy = dispatched(store, "job-b")
    dead = DeadCopies(store)
    assert store.set_lease("job-b", copy.token, datetime.now(UTC) + timedelta(seconds=60))
    assert dead.rows(["job-b"])["job-b"].lease_moved(copy)
    assert dead.dispatch_again(copy, datetime.now(UTC)) is None
    letters: list[tuple[list[Claimed], str]] = []
    assert dead.bury(copy, "why", lambda rows, reason: letters.append((rows, reason))) == "short"
    [(rows, reason)] = letters
    assert reason == "why" and rows[0].job_key == "job-b" and rows[0].task == "tests.count_run"
    assert dead.rows(["job-b"]) == {}
    assert store.stats(datetime.now(UTC))["short"].dead_lettered == 1


def test_an_untouched_lease_is_never_buried(store: DueStore) -> None:
    copy = dispatched(store, "job-c")
    assert DeadCopies(store).bury(copy, "why", lambda rows, reason: None) is None
    assert DeadCopies(store).rows(["job-c"])["job-c"].is_live(copy)


def test_the_last_delivery_moves_the_lease_and_a_copy_handed_back_from_it_stays_live(
        store: DueStore) -> None:
    copy = dispatched(store, "job-d")
    cfg = load_settings({})
    last = SimpleNamespace(headers={"x-delivery-count": cfg.max_deliveries - 1},
                           delivery_info={"routing_key": "short"})
    moved = last_chance(last, copy, store, cfg)
    live = store.live_dispatch("job-d", wait=False)
    assert DeadCopies(store).rows(["job-d"])["job-d"].lease_moved(copy)  # the sweep's sign
    assert moved.matches(live) and not copy.matches(live)
    earlier = SimpleNamespace(headers={"x-delivery-count": 0},
                              delivery_info={"routing_key": "short"})
    assert last_chance(earlier, moved, store, cfg) is moved  # not the last: untouched
