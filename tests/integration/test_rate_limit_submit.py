"""@rate_limit at ``apply_async``: a job takes its place in its key's plan when it is
published. Near places go to the broker (the first straight to its queue, the next
through the broker's wait levels, reaching the queue at their slots); places a store
threshold away or more go straight to the due-jobs store, due at their slots, in
publication order and never pulled forward."""

from __future__ import annotations

import math
import time
import uuid
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any

import pytest
import redis
from kombu import Connection

from routing.broker import queue_depth
from scheduler.store import DueStore
from tests.support.processes import wait_for
from tests.support.rate_tasks import RATE, rated_work

pytestmark = pytest.mark.services


def test_a_key_sent_far_over_its_limit_waits_in_the_store_not_in_the_workers(
        store_in_use: DueStore, broker: Connection, redis_client: redis.Redis) -> None:
    key = f"sub-{uuid.uuid4().hex[:8]}"
    sent = [{"id": f"{key}-{i}", "user_id": key, "bucket": "short", "payload": {"ms": 0}}
            for i in range(40)]
    began = datetime.now(UTC)
    publishing = time.monotonic()
    # A time limit is the producer's option: kept where published; a far place is recur's
    # choice of the store, which does not refuse the call for it.
    results = [rated_work.apply_async((msg,), time_limit=30) for msg in sent]
    took = time.monotonic() - publishing
    stored = [r for r in results if r.stored]
    published = len(results) - len(stored)
    # 5/s and a 5-s store threshold: about 25 places are near, the rest far; each call
    # measures "near" from its own now, so slow calls (a loaded machine) make more near.
    near_most = 26 + math.ceil(took * RATE)
    assert 20 <= published <= near_most and len(stored) == len(sent) - published
    assert [r.id for r in stored] == [m["id"] for m in sent[published:]]  # in order
    dues = [r.due_at for r in stored]
    assert dues[0] >= began + timedelta(seconds=4.5)
    # Each due is its slot read against this process's clock after the call returned:
    # a loaded machine's pause between the two shifts one due, never the slots after it.
    for earlier, later in pairwise(dues):
        assert (later - earlier).total_seconds() == pytest.approx(1 / RATE, abs=0.05)
    assert (dues[-1] - dues[0]).total_seconds() == pytest.approx(
        (len(dues) - 1) / RATE, abs=0.05)
    # Never pulled forward: an idle bucket's early dispatch finds nothing.
    got: list[Any] = []
    store_in_use.dispatch("short", 100, began, dues[-1], got.extend)
    assert got == []
    # The near ones wait in the broker, not in a worker: they reach the queue at their
    # slots, in order, the last one about 5 s after the first.
    assert queue_depth(broker, "short") < published
    wait_for(lambda: queue_depth(broker, "short") == published, 15, "the near jobs queued")
    queued = queued_messages(broker)
    assert [m.headers["id"] for m in queued] == [r.id for r in results[:published]]
    assert "recur_wait_0" not in queued[0].headers  # its place was now
    assert all("recur_wait_0" in m.headers for m in queued[1:])
    assert all(m.delivery_info["routing_key"] == "short" for m in queued)


def queued_messages(conn: Connection) -> list[Any]:
    """The messages in the short queue, in queue order (the queue is emptied)."""
    out = []
    with conn.channel() as channel:
        while (message := channel.basic_get("short", no_ack=True)) is not None:
            out.append(message)
    return out
