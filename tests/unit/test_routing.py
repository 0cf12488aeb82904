from __future__ import annotations

from typing import Any

import pytest

from config.buckets_in_use import BUCKETS, BUCKETS_BY_NAME
from config.errors import InvalidMessage, UnknownBucket
from config.settings import load_settings
from routing.messages import validate_message
from routing.queues import dead_queue, queue_arguments, work_queue
from routing.router import queue_for_message, route_task

CFG = load_settings({})


def deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def msg(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"id": "m1", "user_id": "u1", "bucket": "short", "payload": {"a": 1}}
    base.update(over)
    return {k: v for k, v in base.items() if v is not ...}


@pytest.mark.parametrize("bucket", [b.name for b in BUCKETS])
def test_explicit_bucket_routes_to_its_queue(bucket: str) -> None:
    assert validate_message(msg(bucket=bucket), CFG)["bucket"] == bucket
    assert queue_for_message(msg(bucket=bucket)) == BUCKETS_BY_NAME[bucket].queue


def test_kind_is_mapped_to_a_bucket() -> None:
    valid = validate_message(msg(bucket=..., kind="report"), CFG)
    assert valid["bucket"] == "long" and valid["kind"] == "report"


#: A message with a key that is not a string beside a string one (they do not sort).
INT_KEYED: dict[Any, Any] = {**msg(), 1: "x", "zz": 2}


@pytest.mark.parametrize(("message", "field", "error"), [
    (msg(bucket="huge"), "bucket", UnknownBucket),
    (msg(bucket=..., kind="nope"), "kind", UnknownBucket),
    (msg(bucket=...), "bucket", InvalidMessage),
    (msg(kind="report"), "bucket", InvalidMessage),
    (msg(user_id=...), "user_id", InvalidMessage),
    (msg(user_id=""), "user_id", InvalidMessage),
    (msg(user_id=42), "user_id", InvalidMessage),
    (msg(id=...), "id", InvalidMessage),
    (msg(payload=...), "payload", InvalidMessage),
    (msg(payload={"x": "y" * 2000}), "payload", InvalidMessage),
    (msg(payload={"when": object()}), "payload", InvalidMessage),
    (msg(payload=float("nan")), "payload", InvalidMessage),
    (msg(extra=1), "extra", InvalidMessage),
    (["not", "a", "dict"], "message", InvalidMessage),
    (msg(payload={"a": deep(3000)}), "payload", InvalidMessage),
    (msg(bucket=["short"]), "bucket", UnknownBucket),
    (msg(bucket={"a": 1}), "bucket", UnknownBucket),
    (INT_KEYED, "1", InvalidMessage),
    (msg(payload=deep(150)), "payload", InvalidMessage),
    (msg(user_id="u\ud800"), "user_id", InvalidMessage),
    (msg(id="\udfff"), "id", InvalidMessage),
    (msg(payload={"t": "a\ud83d"}), "payload", InvalidMessage),
    (msg(payload={"k\udc00": 1}), "payload", InvalidMessage),
])
def test_bad_message_names_the_wrong_field(message: Any, field: str,
                                           error: type[Exception]) -> None:
    with pytest.raises(error) as caught:
        validate_message(message, CFG)
    assert isinstance(caught.value, InvalidMessage)
    assert caught.value.field == field
    assert field in str(caught.value)


def test_unicode_beyond_ascii_is_valid_only_lone_surrogates_are_not() -> None:
    # An emoji is a surrogate pair in ASCII JSON ("\\ud83d\\ude00"): valid, kept.
    valid = validate_message(msg(user_id="\u00fc\U0001f600", payload={"t": "\\ud8 \U0001f600"}),
                             CFG)
    assert valid["user_id"] == "\u00fc\U0001f600"


def test_payload_limit_is_the_configured_size() -> None:
    payload = "x" * 90  # encodes to 92 bytes with its quotes
    validate_message(msg(payload=payload), load_settings({"RECUR_MAX_PAYLOAD_BYTES": "92"}))
    with pytest.raises(InvalidMessage, match="93 bytes"):
        validate_message(msg(payload=payload + "x"),
                         load_settings({"RECUR_MAX_PAYLOAD_BYTES": "92"}))


class _Task:
    routes_by_message = True


def test_router_routes_message_tasks_and_ignores_others() -> None:
    assert route_task("t", [msg(bucket="long")], {}, {}, task=_Task()) == {"queue": "long"}
    assert route_task("t", [], {"message": msg(bucket="medium")}, {},
                      task=_Task()) == {"queue": "medium"}
    assert route_task("celery.chord_unlock", [], {}, {}, task=object()) is None
    with pytest.raises(UnknownBucket):
        route_task("t", [msg(bucket="huge")], {}, {}, task=_Task())


def test_queues_are_durable_quorum_with_dead_letters_and_a_delivery_limit() -> None:
    bucket = BUCKETS_BY_NAME["long"]
    queue = work_queue(bucket, CFG)
    assert queue.durable and queue.name == "long"
    args = queue_arguments(bucket, CFG)
    assert args["x-queue-type"] == "quorum"
    assert args["x-dead-letter-exchange"] == "recur.dead"
    assert args["x-dead-letter-routing-key"] == "long.dead"
    assert args["x-delivery-limit"] == CFG.max_deliveries - 1
    assert dead_queue(bucket, CFG).name == "long.dead"
    classic = queue_arguments(bucket, load_settings({"RECUR_QUEUE_TYPE": "classic"}))
    assert "x-delivery-limit" not in classic
