"""``apply_async``/``retry`` on our tasks: long delays and job keys go to the store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from config.errors import (
    ArgumentsMismatch,
    InvalidMessage,
    InvalidSchedule,
    UnknownBucket,
    one_line,
)
from routing.broker import queue_depth
from scheduler.calls import ScheduledJob
from scheduler.store import DueStore
from scheduler.wire import decode_call
from tasks.process import process_message
from tests.support.processes import wait_for


def message(ident: str = "m-1", **extra: Any) -> dict[str, Any]:
    return {"id": ident, "user_id": "u-1", "bucket": "short", "payload": {"n": 1}, **extra}


def rows(store: DueStore) -> dict[str, Any]:
    return store.stats(datetime.now(UTC) + timedelta(days=365))


def test_long_countdown_writes_one_row_per_key(store_in_use: DueStore) -> None:
    before = datetime.now(UTC)
    result = process_message.apply_async((message(),), countdown=3600)
    assert isinstance(result, ScheduledJob) and result.id == "m-1"
    assert before + timedelta(seconds=3600) <= result.due_at
    process_message.apply_async((message(payload={"n": 2}),), countdown=7200)
    assert rows(store_in_use)["short"].scheduled == 1
    assert store_in_use.stats(before + timedelta(seconds=3601)).get("short") is not None
    assert store_in_use.stats(before + timedelta(seconds=3601))["short"].due == 0


def test_eta_and_explicit_job_key(store_in_use: DueStore) -> None:
    eta = datetime.now(UTC) + timedelta(hours=2)
    process_message.apply_async((message("a"),), eta=eta, job_key="daily-a")
    process_message.apply_async((message("a"),), eta=eta, job_key="daily-a")
    got: list[Any] = []
    store_in_use.dispatch("short", 10, eta, eta, got.extend)
    assert [(c.job_key, c.due_at) for c in got] == [("daily-a", eta)]
    assert '"bucket"' not in got[0].args  # the row's bucket column holds it
    args, kwargs, retries = decode_call(got[0].args, got[0].job_key, got[0].bucket)
    assert args == [message("a")] and kwargs == {} and retries == 0


def test_short_countdown_is_published_directly(store_in_use: DueStore, broker: Any) -> None:
    process_message.apply_async((message(),), countdown=0)
    wait_for(lambda: queue_depth(broker, "short") == 1, 10, "the message in the short queue")
    assert rows(store_in_use) == {}


@pytest.mark.parametrize("options", [
    {"countdown": 0.5}, {"countdown": 1e-300}, {"countdown": 2.5},
    {"eta": datetime.now(UTC) + timedelta(seconds=0.4)},
])
def test_a_short_delay_of_any_size_is_published(store_in_use: DueStore, broker: Any,
                                                 options: dict[str, Any]) -> None:
    # kombu's native delayed delivery refuses a delay under one second, and the
    # delayed-delivery exchanges must exist before any worker declared them.
    process_message.apply_async((message(),), **options)
    wait_for(lambda: queue_depth(broker, "short") == 1, 15, "the message in the short queue")
    assert rows(store_in_use) == {}


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize("countdown", [None, 600], ids=["published", "stored"])
@pytest.mark.parametrize(("args", "kwargs", "options", "error", "match"), [
    ((message(),), {"extra": 1}, {}, ArgumentsMismatch, "unexpected keyword argument 'extra'"),
    ((message(), message()), {}, {}, ArgumentsMismatch, "do not fit tasks.process_message"),
    ((), {}, {}, ArgumentsMismatch, "missing 1 required positional argument"),
    ((message(),), [1], {}, InvalidMessage, "kwargs: must be a mapping"),
    ((message(payload=nested(3000)),), {}, {}, InvalidMessage, "nested too deeply"),
    ((message(bucket=["short"]),), {}, {}, UnknownBucket, "unknown bucket"),
    ((message(),), {}, {"time_limit": float("nan")}, InvalidSchedule, "time_limit"),
    ((message(),), {}, {"soft_time_limit": -1}, InvalidSchedule, "soft_time_limit"),
    ((message(),), {}, {"time_limit": 5, "soft_time_limit": 10}, InvalidSchedule, "above"),
    ((message(),), {}, {"expires": float("inf")}, InvalidSchedule, "expires"),
    ((message(),), {}, {"expires": "soon"}, InvalidSchedule, "expires"),
    ((message(),), {}, {"priority": 999}, InvalidSchedule, "priority"),
    ((message(),), {}, {"headers": "x"}, InvalidSchedule, "headers must be a mapping"),
    ((message(user_id="u\ud800"),), {}, {}, InvalidMessage, "lone surrogate"),
    ((message(payload={"t": "\udc00"}),), {}, {}, InvalidMessage, "lone surrogate"),
])
def test_malformed_calls_raise_one_recur_error_on_both_paths(
        store_in_use: DueStore, broker: Any, args: Any, kwargs: Any, options: dict[str, Any],
        error: type[Exception], match: str, countdown: int | None) -> None:
    with pytest.raises(error, match=match) as refused:
        process_message.apply_async(args, kwargs, countdown=countdown, **options)
    line = one_line(refused.value)
    assert line is not None and "\n" not in line
    assert rows(store_in_use) == {} and queue_depth(broker, "short") == 0


@pytest.mark.parametrize(("options", "error", "match"), [
    ({"countdown": -1}, InvalidSchedule, "countdown"),
    ({"countdown": "soon"}, InvalidSchedule, "countdown"),
    ({"eta": datetime(2030, 1, 1)}, InvalidSchedule, "naive"),
    ({"countdown": 60, "eta": datetime.now(UTC)}, InvalidSchedule, "not both"),
    ({"countdown": 60, "job_key": ""}, InvalidSchedule, "job_key"),
])
def test_bad_schedules_are_refused_and_nothing_written(
        store_in_use: DueStore, options: dict[str, Any], error: type[Exception],
        match: str) -> None:
    with pytest.raises(error, match=match):
        process_message.apply_async((message(),), **options)
    assert rows(store_in_use) == {}


@pytest.mark.parametrize(("args", "kwargs", "error", "match"), [
    ((message(),), {"extra": object()}, InvalidMessage, "args"),
    ((message(payload="x" * 5000),), {}, InvalidMessage, "payload"),
    ((message(bucket="huge"),), {}, UnknownBucket, "bucket"),
])
def test_bad_calls_are_refused_and_nothing_written(
        store_in_use: DueStore, args: tuple[Any, ...], kwargs: dict[str, Any],
        error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        process_message.apply_async(args, kwargs, countdown=600)
    assert rows(store_in_use) == {}


@pytest.mark.parametrize("option", [{"time_limit": 5}, {"soft_time_limit": 3},
                                    {"expires": 7200}, {"priority": 3}])
def test_an_option_the_store_cannot_keep_is_refused_not_dropped(
        store_in_use: DueStore, broker: Any, option: dict[str, Any]) -> None:
    """The scheduler publishes a stored call later with its bucket's limits: a producer's
    ``time_limit`` (or expiry, priority) on a long delay would be lost without a word."""
    with pytest.raises(InvalidSchedule, match=f"{next(iter(option))} is not kept"):
        process_message.apply_async((message(),), countdown=600, **option)
    with pytest.raises(InvalidSchedule, match="is not kept"):
        process_message.apply_async((message("m-2"),), job_key="k-2", **option)
    assert rows(store_in_use) == {}
    process_message.apply_async((message("m-3"),), countdown=None, **option)  # published
    wait_for(lambda: queue_depth(broker, "short") == 1, 10, "the published message")
