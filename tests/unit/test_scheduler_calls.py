"""The task side of the store without services: delays, argument encoding, dispatch headers."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

from config.errors import InvalidMessage, InvalidSchedule
from scheduler.calls import check_message_options, due_time
from scheduler.wire import Dispatch, decode_call, dispatch_header, dispatch_of, encode_call, micros

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def test_due_time_from_countdown_or_aware_eta() -> None:
    assert due_time(None, None, NOW) is None
    assert due_time(90, None, NOW) == NOW + timedelta(seconds=90)
    plus2 = timezone(timedelta(hours=2))
    assert due_time(None, datetime(2030, 1, 1, 3, tzinfo=plus2), NOW) == NOW + timedelta(hours=1)
    assert due_time(None, "2030-01-01T00:10:00+00:00", NOW) == NOW + timedelta(minutes=10)


@pytest.mark.parametrize(("countdown", "eta", "match"), [
    (-1, None, "countdown"), (math.inf, None, "countdown"), (True, None, "countdown"),
    (None, datetime(2030, 1, 1), "naive"), (None, "tomorrow", "ISO"), (None, 5, "datetime"),
    (10, NOW, "not both"),
])
def test_bad_delays(countdown: object, eta: object, match: str) -> None:
    with pytest.raises(InvalidSchedule, match=match):
        due_time(countdown, eta, NOW)


@pytest.mark.parametrize(("options", "match"), [
    ({"countdown": 10 ** 5000}, "past the last time"),   # no float holds it: not isfinite's
    ({"countdown": -10 ** 5000}, ">= 0, got an integer of 16610 bits"),  # too long to print
    ({"countdown": 2 ** 1100}, "past the last time"),
    ({"eta": "x" * 100_000}, "not an ISO 8601 time"),
    ({"time_limit": 10 ** 5000, "soft_time_limit": 10 ** 5001}, "is above time_limit"),
    ({"priority": 10 ** 5000}, "0..255, got an integer of"),
])
def test_numbers_past_a_float_and_long_values_are_one_short_line(
        options: dict[str, object], match: str) -> None:
    with pytest.raises(InvalidSchedule, match=match) as refused:
        check_message_options(options)
        due_time(options.get("countdown"), options.get("eta"), NOW)
    assert len(str(refused.value)) < 200


def test_call_arguments_round_trip_and_refuse_non_json() -> None:
    text = encode_call([{"id": "a"}], {"k": 1}, retries=2)
    assert decode_call(text) == ([{"id": "a"}], {"k": 1}, 2)
    assert decode_call('{"args":[1],"kwargs":{}}') == ([1], {}, 0)  # as the seed job writes


def test_stored_args_leave_out_what_the_row_holds() -> None:
    msg = {"id": "k1", "user_id": "u", "bucket": "short", "payload": {"every": 60}}
    text = encode_call([msg], {}, job_key="k1", bucket="short")
    assert text == '["u",{"every":60}]'  # one message: the array form
    assert decode_call(text, "k1", "short") == ([msg], {}, 0)
    # Another key or bucket is kept as it is, in the object form.
    other = encode_call([msg], {}, job_key="other", bucket="long")
    assert other.startswith('{"args":[{"id":"k1",')
    assert decode_call(other, "other", "long") == ([msg], {}, 0)
    kinded = {"id": "k1", "user_id": "u", "kind": "report", "payload": None}
    assert encode_call([kinded], {}, job_key="k1", bucket="long") == '["u",null,"report"]'
    assert decode_call(encode_call([kinded], {}, job_key="k1", bucket="long"), "k1",
                       "long") == ([kinded], {}, 0)
    # Anything more than the one message keeps the object form.
    assert encode_call([msg], {}, 1, job_key="k1", bucket="short") == \
        '{"args":[{"user_id":"u","payload":{"every":60}}],"retries":1}'
    assert decode_call(encode_call([msg, 2], {}, job_key="k1", bucket="short"), "k1",
                       "short") == ([msg, 2], {}, 0)
    # The full form (as published) reads the same.
    full = '{"args":[{"id":"k1","user_id":"u","bucket":"short","payload":{"every":60}}],' \
           '"kwargs":{}}'
    assert decode_call(full, "k1", "short") == ([msg], {}, 0)
    with pytest.raises(InvalidMessage, match="args"):
        encode_call([object()], {})
    with pytest.raises(InvalidMessage, match="args"):
        encode_call([math.nan], {})


def test_dispatch_headers_as_celery_exposes_them() -> None:
    lease = NOW + timedelta(minutes=30)
    as_attributes = SimpleNamespace(recur_dispatch=dispatch_header("k", 3, lease))
    in_headers = SimpleNamespace(headers={"recur_dispatch": ["k", 3, micros(lease), None]})
    assert dispatch_of(as_attributes) == Dispatch("k", 3, micros(lease))
    assert dispatch_of(in_headers) == Dispatch("k", 3, micros(lease))
    assert dispatch_of(SimpleNamespace(headers=None)) is None
    live = dispatch_of(as_attributes)
    assert live is not None and live.matches((3, lease))
    assert not live.matches((3, lease + timedelta(microseconds=1)))  # a rolled-back dispatch
    assert not live.matches((4, lease)) and not live.matches(None)


def test_a_job_under_an_explicit_key_reschedules_its_own_row() -> None:
    from config.settings import settings
    from scheduler.calls import store_plan

    msg = {"id": "msg-1", "user_id": "u-1", "bucket": "short", "payload": {"every": 60}}
    running = SimpleNamespace(task="tasks.process_message", args=[msg], kwargs={},
                              recur_dispatch=dispatch_header("report-42", 3, NOW))
    plan = store_plan("tasks.process_message", [msg], None, {"countdown": 60}, None,
                      running, settings())
    assert plan is not None and plan.job.job_key == "report-42"
    assert plan.reschedule_of is not None and plan.reschedule_of.token == 3
    # Another message sent from the same run is a job of its own, under its own id.
    other = {**msg, "id": "msg-2"}
    plan = store_plan("tasks.process_message", [other], None, {"countdown": 60}, None,
                      running, settings())
    assert plan is not None and plan.job.job_key == "msg-2" and plan.reschedule_of is None
