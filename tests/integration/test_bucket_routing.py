"""Each bucket's messages land on its own queue and only its own workers run them."""

from __future__ import annotations

from typing import Any

import pytest
from kombu import Connection

from config.buckets_in_use import BUCKETS
from config.errors import InvalidMessage
from config.settings import settings
from routing.broker import queue_depth
from tasks import completions
from tasks.process import process_message
from tests.support.processes import wait_for

pytestmark = pytest.mark.services


def depths(conn: Connection) -> dict[str, int]:
    return {b.queue: queue_depth(conn, b.queue) for b in BUCKETS}


def message(i: int, **over: Any) -> dict[str, Any]:
    return {"id": f"m{i}", "user_id": f"u{i}", "payload": {"i": i}, **over}


def test_messages_land_on_their_bucket_queue(broker: Connection) -> None:
    for i in range(3):
        process_message.delay(message(i, bucket="short"))
    for i in range(2):
        process_message.apply_async(args=[message(10 + i, bucket="medium")])
    process_message.delay(message(20, kind="report"))  # kind -> long
    wait_for(lambda: depths(broker) == {"short": 3, "medium": 2, "long": 1, "io": 0}, 10,
             "each queue to hold its bucket's messages")


BAD_MESSAGES = [
    (message(1, bucket="huge"), "bucket"),
    (message(2, kind="no-such-kind"), "kind"),
    ({"id": "m3", "bucket": "short", "payload": None}, "user_id"),
    (message(4, bucket="short", payload="x" * 5000), "payload"),
    (message(5, bucket="short", payload={"at": object()}), "payload"),
]


@pytest.mark.parametrize(("bad", "field"), BAD_MESSAGES)
def test_bad_input_is_refused_and_nothing_is_published(broker: Connection, celery_app: Any,
                                                       bad: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidMessage) as caught:
        process_message.apply_async(args=[bad])
    assert caught.value.field == field and field in str(caught.value)
    with pytest.raises(InvalidMessage):  # by name, bypassing the task object
        celery_app.send_task("tasks.process_message", args=[bad])
    process_message.delay(message(99, bucket="short"))  # a good one still goes through
    wait_for(lambda: depths(broker) == {"short": 1, "medium": 0, "long": 0, "io": 0}, 10,
             "only the good message on the broker")


def test_each_bucket_is_consumed_only_by_its_workers(broker: Connection, celery_app: Any,
                                                     start_worker: Any,
                                                     redis_client: Any) -> None:
    nodes = {b.name: start_worker(b.queue, env={"RECUR_WORK_SCALE": "0.05"})[1]
             for b in BUCKETS}
    active = celery_app.control.inspect(destination=list(nodes.values()), timeout=5)
    queues = active.active_queues() or {}
    for bucket, node in nodes.items():
        assert [q["name"] for q in queues[node]] == [bucket], queues

    since = completions.last_id(redis_client, settings())
    sent = {}
    for i in range(30):
        bucket = BUCKETS[i % len(BUCKETS)].name
        sent[f"m{i}"] = bucket
        process_message.delay(message(i, bucket=bucket))
    seen: dict[str, completions.Completion] = {}

    def all_seen() -> bool:
        seen.update({c.message_id: c for c in
                     completions.read_since(redis_client, settings(), since)})
        return len(seen) == len(sent)

    wait_for(all_seen, 60, "all 30 messages to complete")
    for mid, bucket in sent.items():
        assert seen[mid].bucket == bucket
        assert seen[mid].worker == nodes[bucket], (mid, seen[mid])
