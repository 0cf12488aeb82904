"""What an idle scheduler reads (scheduler/store/next_wake.py), on SQLite and PostgreSQL:
the next moment a row needs it, and whether a fill could claim anything now."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from scheduler.store import DueStore, Job
from scheduler.store.next_wake import claimable, next_wake

NOW = datetime.now(UTC).replace(microsecond=0)
BUCKETS = ["short", "medium"]


def job(key: str, due: datetime, bucket: str = "short") -> Job:
    msg = {"id": key, "user_id": "u", "bucket": bucket, "payload": {}}
    return Job(key, "tasks.process_message", bucket, json.dumps({"args": [msg]}), due)


def test_an_empty_store_needs_nothing(store: DueStore) -> None:
    assert next_wake(store, BUCKETS, BUCKETS, NOW) is None
    assert not claimable(store, BUCKETS, BUCKETS, NOW)


def test_the_earliest_future_row_of_any_bucket_wakes_it(store: DueStore) -> None:
    store.schedule([job("a", NOW + timedelta(seconds=30)),
                    job("b", NOW + timedelta(seconds=7), bucket="medium"),
                    job("c", NOW + timedelta(seconds=9), bucket="long")], NOW)
    assert next_wake(store, BUCKETS, [], NOW) == NOW + timedelta(seconds=7)  # long: not asked
    assert not claimable(store, BUCKETS, [], NOW)


def test_a_due_row_or_a_pull_forward_candidate_is_claimable(store: DueStore) -> None:
    store.schedule([job("later", NOW + timedelta(hours=1))], NOW)
    assert not claimable(store, BUCKETS, [], NOW)
    assert claimable(store, BUCKETS, ["short"], NOW)  # never ran: no floor, pull it forward
    store.schedule([job("due", NOW - timedelta(seconds=1), bucket="medium")], NOW)
    assert claimable(store, BUCKETS, [], NOW)
    assert next_wake(store, BUCKETS, [], NOW) == NOW + timedelta(hours=1)  # past ones: not


def test_a_lease_end_wakes_it(store: DueStore) -> None:
    store.schedule([job("leased", NOW - timedelta(seconds=1))], NOW)
    lease_end = NOW + timedelta(seconds=42)

    def publish(batch: Any) -> None:
        return None

    assert store.dispatch("short", 10, NOW, lease_end, publish) == 1
    assert next_wake(store, BUCKETS, BUCKETS, NOW) == lease_end
    assert not claimable(store, BUCKETS, BUCKETS, NOW)
