"""Headers of the wrong type are the message's fault, named in one line: Celery's (the
consumer dead-letters the message before Celery or its pool reads them, tasks/consumer.py)
and recur's control headers, whatever their size."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kombu import Message

from config.errors import InvalidControlHeader
from scheduler.wire import DISPATCH_HEADER, parse_dispatch
from tasks import app, process_message
from tasks.consumer import shape_problem
from tasks.distlock.job import SEQ, SINCE, moment, whole_number

MSG = {"id": "m-1", "user_id": "u", "bucket": "short", "payload": None}


def message(**overrides: Any) -> Message:
    """A protocol 2 message as the app publishes it, with some headers replaced."""
    task = app.amqp.as_task_v2("t-1", process_message.name, args=(MSG,), kwargs={},
                               time_limit=45, soft_time_limit=30)
    headers = {**task.headers, **overrides}
    return Message(body=json.dumps(task.body), content_type="application/json",
                   content_encoding="utf-8", headers=headers)


def test_the_apps_own_headers_pass() -> None:
    assert shape_problem(message()) is None
    assert shape_problem(message(timelimit=[None, None], retries=3, parent_id="p")) is None
    assert shape_problem(message(timelimit=(1.5, 0))) is None


@pytest.mark.parametrize(("name", "value"), [
    ("timelimit", "ab"),  # unpacks as two strings: the pool's timer stopped the worker
    ("timelimit", ["5", "x"]),
    ("timelimit", [1, 2, 3]),
    ("timelimit", [True, None]),
    ("timelimit", [float("inf"), None]),
    ("timelimit", [-1, None]),
    ("timelimit", {"hard": 1}),
    ("retries", "3"),
    ("retries", -1),
    ("retries", 1.5),
    ("retries", False),
    ("parent_id", {"a": 1}),
    ("root_id", ["r"]),
    ("group", 7),
    ("id", b"t-1"),
])
def test_a_celery_header_of_the_wrong_type_is_named(name: str, value: Any) -> None:
    problem = shape_problem(message(**{name: value}))
    assert problem is not None and problem.startswith(f"header {name}: must be"), problem


HUGE = 10**5000  # Python refuses to print it: an error line must still name the header


@pytest.mark.parametrize(("read", "value", "name"), [
    (moment, HUGE, SINCE),  # was OverflowError: too large for a float
    (moment, -HUGE, SINCE),
    (moment, 2**1100, SINCE),
    (whole_number, -HUGE, SEQ),  # was ValueError: the error's repr of it
    (parse_dispatch, HUGE, DISPATCH_HEADER),
    (parse_dispatch, [HUGE, 1, 2], DISPATCH_HEADER),
    (parse_dispatch, ["k", [HUGE], 2], DISPATCH_HEADER),
], ids=["since", "since-negative", "since-past-float", "seq-negative", "dispatch",
        "dispatch-key", "dispatch-token"])
def test_a_number_too_large_to_print_is_refused_by_name(read: Any, value: Any,
                                                        name: str) -> None:
    with pytest.raises(InvalidControlHeader, match=f"^control header {name}: "):
        read(value)
