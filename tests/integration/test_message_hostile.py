"""Hostile messages and delays at ``apply_async``: one :class:`InvalidMessage` naming the
field, nothing stored or published; a call the broker or store would take late (an eta long
past, a recurring message whose next run the store would refuse) is settled at the call;
a resequencer batch is numbered only once it is known to be a list of messages."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
import redis
from kombu import Connection

from config.errors import InvalidMessage
from config.settings import load_settings
from routing.intake import submit_batch
from routing.reseq.state import Resequencer
from scheduler.store import DueStore
from tasks.process import process_message
from tests.integration.test_bucket_routing import depths
from tests.integration.test_scheduler_bounds import stored
from tests.support.processes import wait_for


def message(ident: str = "h-1", **over: Any) -> dict[str, Any]:
    return {"id": ident, "user_id": "u-1", "bucket": "short", "payload": {"n": 1}, **over}


def only_good_one_published(broker: Connection) -> None:
    process_message.delay(message("good"))
    wait_for(lambda: depths(broker) == {"short": 1, "medium": 0, "long": 0, "io": 0}, 10,
             "only the good message on the broker")


NON_STRING_KEYS = {
    "int key": {1: "a"}, "None key": {None: 1}, "float key": {1.5: 1}, "bool key": {True: 1},
    "nested int key": {"a": [{"b": {2: 3}}]},
    "int key beside its string": {"1": "kept", 1: "lost"},  # JSON would keep only one
}


@pytest.mark.parametrize("payload", NON_STRING_KEYS.values(), ids=NON_STRING_KEYS.keys())
def test_a_non_string_key_in_the_payload_is_refused(broker: Connection, store_in_use: DueStore,
                                                    payload: dict[Any, Any]) -> None:
    for options in ({"countdown": 3600}, {}, {"job_key": "h-key"}):
        with pytest.raises(InvalidMessage) as caught:
            process_message.apply_async(args=[message(payload=payload)], **options)
        assert caught.value.field == "payload" and "key must be a string" in str(caught.value)
    with pytest.raises(InvalidMessage, match="item 0: payload"):
        process_message.apply_many([message(payload=payload)], countdown=3600)
    assert stored(store_in_use) == 0
    only_good_one_published(broker)


@pytest.mark.parametrize("args", [message(), "abc", {1, 2}], ids=["dict", "str", "set"])
def test_args_that_are_no_list_are_named(broker: Connection, store_in_use: DueStore,
                                         args: Any) -> None:
    """Celery would take a dict's keys as the arguments: the message check then said
    "message: must be a JSON object, got str", naming the wrong thing."""
    for options in ({"countdown": 3600}, {}):
        with pytest.raises(InvalidMessage) as caught:
            process_message.apply_async(args=args, **options)
        assert caught.value.field == "args" and type(args).__name__ in str(caught.value)
    assert stored(store_in_use) == 0
    only_good_one_published(broker)


def test_an_eta_long_past_is_published_to_run_now(broker: Connection) -> None:
    # Celery turns an eta into a countdown and refuses one under -2**31 s with a ValueError
    for eta in (datetime(1, 1, 2, tzinfo=UTC), datetime(1950, 1, 1, tzinfo=UTC),
                "0001-01-02T00:00:00+00:00"):
        process_message.apply_async(args=[message()], eta=eta)
    wait_for(lambda: depths(broker)["short"] == 3, 10, "all three on the short queue")


RECURRING = {"every": 600}
UNSTORABLE = {
    "NUL in the id": (message("a\x00b", payload=RECURRING), "id", "U+0000 at position 1"),
    "newline in the id": (message("a\nb", payload=RECURRING), "id", "U+000A"),
    "C1 control in the id": (message("a\x85", payload=RECURRING), "id", "U+0085"),
    "NUL in the user id": (message(user_id="u\x00", payload=RECURRING), "user_id", "NUL"),
    "NUL in the payload": (message(payload={**RECURRING, "note": ["x\x00"]}), "payload", "NUL"),
}


@pytest.mark.parametrize(("bad", "field", "says"), UNSTORABLE.values(), ids=UNSTORABLE.keys())
def test_a_recurring_message_published_now_is_one_its_next_run_can_store(
        broker: Connection, bad: dict[str, Any], field: str, says: str) -> None:
    # published now, it ran once and its reschedule failed at the worker: the schedule stopped
    for options in ({}, {"countdown": 2}):  # now, and a short delay: both published
        with pytest.raises(InvalidMessage) as caught:
            process_message.apply_async(args=[bad], **options)
        assert caught.value.field == field and says in str(caught.value)
    only_good_one_published(broker)


def test_what_does_not_recur_again_or_has_its_own_key_is_taken(broker: Connection,
                                                              store_in_use: DueStore) -> None:
    process_message.delay(message("last\nrun", payload={"every": 600, "runs": 1}))
    process_message.delay(message("once\x00", payload={"n": 1}))
    process_message.apply_async(args=[message("a\nb", payload=RECURRING)], job_key="h-own",
                                countdown=3600)
    assert stored(store_in_use) == 1
    wait_for(lambda: depths(broker)["short"] == 2, 10, "both published")


def one_message(ident: str) -> dict[str, Any]:
    return {"id": ident, "user_id": "u-1", "bucket": "short", "payload": None}


def test_a_batch_for_the_resequencer_is_numbered_only_when_it_can_be_published(
        broker: Connection, redis_client: redis.Redis) -> None:
    dest = f"d-{uuid.uuid4().hex[:8]}"
    cfg = load_settings({**os.environ, "RECUR_DESTINATIONS": f"{dest}:http://127.0.0.1:9/x"})
    reseq = Resequencer(redis_client, cfg)
    for bad in (one_message("m"), "mm", None, 5, b"xy"):  # not a list of messages
        with pytest.raises(InvalidMessage) as caught:
            submit_batch(dest, bad, cfg)  # type: ignore[arg-type]
        assert caught.value.field == "messages" and "must be a list" in str(caught.value)
    assert reseq.status(dest).assigned == 0  # nothing numbered
    # a generator is a batch: every number it took is published (was: numbered, then a
    # TypeError, and the numbers a gap that held the destination for the gap timeout)
    taken = submit_batch(dest, (one_message(f"g{i}") for i in range(3)), cfg)
    assert [a.seq for a in taken] == [1, 2, 3] and [a.message_id for a in taken] == [
        "g0", "g1", "g2"]
    assert submit_batch(dest, (one_message("t"),), cfg)[0].seq == 4
    wait_for(lambda: depths(broker)["short"] == 4, 10, "all four published")
