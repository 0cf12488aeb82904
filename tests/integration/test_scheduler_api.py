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
    with pytest.raises(InvalidSchedule, match=f"item 0: {next(iter(option))} is not kept"):
        process_message.apply_many([message("m-4")], countdown=600, **option)
    # a producer's own retries= outside a run is no retry: its options are checked too
    with pytest.raises(InvalidSchedule, match=f"{next(iter(option))} is not kept"):
        process_message.apply_async((message("m-5"),), countdown=600, retries=1, **option)
    assert rows(store_in_use) == {}


#: Options a stored run would not carry (scheduler/call_options.py), beside NOT_STORED.
REFUSED = [
    {"queue": "medium"}, {"routing_key": "medium"}, {"exchange": "elsewhere"},
    {"exchange_type": "fanout"}, {"serializer": "pickle"}, {"compression": "zlib"},
    {"content_type": "application/x-yaml"}, {"content_encoding": "latin-1"},
    {"delivery_mode": 1}, {"headers": {"tenant": "a"}}, {"stamped_headers": ["s"]},
    {"ignore_result": False}, {"correlation_id": "corr-1"}, {"shadow": "nice-name"},
    {"argsrepr": "(...)"}, {"kwargsrepr": "{...}"}, {"expiration": 60},
    {"user_id": "guest"}, {"app_id": "billing"}, {"declare": ["short"]},
    {"immediate": True}, {"route_name": "x"},
]


def refused_everywhere(option: dict[str, Any]) -> None:
    """``option`` refused by name on each store path: apply_async with a long delay or a
    job key, apply_many as a shared option and on one call's signature."""
    name = next(iter(option))
    with pytest.raises(InvalidSchedule, match=f"^{name} is not kept") as refused:
        process_message.apply_async((message(),), countdown=600, **option)
    assert "\n" not in str(refused.value)
    with pytest.raises(InvalidSchedule, match=f"^{name} is not kept"):
        process_message.apply_async((message("m-2"),), job_key="k-2", **option)
    with pytest.raises(InvalidSchedule, match=f"item 0: {name} is not kept"):
        process_message.apply_many([message("m-3")], countdown=600, **option)
    with pytest.raises(InvalidSchedule, match=f"item 1: {name} is not kept"):
        process_message.apply_many([message("m-4"), process_message.s(message("m-5")).set(
            countdown=600, **option)])


@pytest.mark.parametrize("option", REFUSED, ids=lambda o: next(iter(o)))
def test_a_celery_option_the_stored_run_would_not_carry_is_refused(
        store_in_use: DueStore, option: dict[str, Any]) -> None:
    """The scheduler publishes a stored call later as its own message (JSON, persistent,
    to its bucket's queue, its job key as task id): an option that changes that message
    is refused by name, not lost."""
    refused_everywhere(option)
    assert rows(store_in_use) == {}


def test_the_same_options_still_go_to_the_broker_on_a_short_delay(
        store_in_use: DueStore, broker: Any) -> None:
    process_message.apply_async((message(),), countdown=None, queue="medium",
                                headers={"tenant": "a"}, compression="zlib")
    wait_for(lambda: queue_depth(broker, "medium") == 1, 10, "the message in medium")
    assert rows(store_in_use) == {}


def test_harmless_forms_are_accepted_and_stored(store_in_use: DueStore) -> None:
    """What names the stored run's own routing or format, what only concerns this call's
    publish now, and the ids Celery's canvas fills in."""
    from config.buckets_in_use import bucket_table
    from config.settings import settings
    from routing.queues import TASK_EXCHANGE, work_queue

    harmless: dict[str, Any] = {
        "queue": work_queue(bucket_table().get("short"), settings()), "routing_key": "short",
        "exchange": TASK_EXCHANGE, "exchange_type": "topic", "serializer": "json",
        "content_type": "application/json", "content_encoding": "utf-8", "delivery_mode": 2,
        "compression": None, "headers": {}, "ignore_result": True, "correlation_id": "m-1",
        "shadow": "tasks.process_message", "chain": None, "mandatory": True, "retry": True,
        "retry_policy": {"max_retries": 1}, "timeout": 5, "confirm_timeout": 5,
        "reply_to": "some-oid", "root_id": "r", "parent_id": "p", "group_id": "g",
        "group_index": 0, "add_to_parent": False, "origin": "host", "time_limit": None,
    }
    result = process_message.apply_async((message(),), countdown=600, **harmless)
    assert result.id == "m-1"
    assert process_message.apply_many([message("m-2")], countdown=600, queue="short",
                                      serializer="json", headers={}) == ["m-2"]
    assert rows(store_in_use)["short"].scheduled == 2


def test_a_task_id_names_the_stored_job(store_in_use: DueStore) -> None:
    result = process_message.apply_async((message(),), countdown=600, task_id="t-1")
    assert result.id == "t-1" and result.state == "SCHEDULED"
    process_message.apply_async((message(),), job_key="t-2", task_id="t-2")  # the same
    with pytest.raises(InvalidSchedule, match="task_id 't-3' and job_key 'k-3'"):
        process_message.apply_async((message(),), job_key="k-3", task_id="t-3")
    with pytest.raises(InvalidSchedule, match="task_id"):
        process_message.apply_async((message(),), countdown=600, task_id="x" * 5000)
    sig = process_message.s(message("m-9")).set(countdown=600, task_id="t-4")
    assert process_message.apply_many([sig]) == ["t-4"]
    got: list[Any] = []
    far = datetime.now(UTC) + timedelta(days=1)
    store_in_use.dispatch("short", 10, far, far, got.extend)
    assert sorted(c.job_key for c in got) == ["t-1", "t-2", "t-4"]


def test_canvas_calls_with_a_long_delay_go_to_the_store(store_in_use: DueStore) -> None:
    """A frozen signature, a group of delayed signatures: each stored under the id Celery
    froze, so the AsyncResult (and the GroupResult) canvas hands out finds its job."""
    from celery import chain, group

    sig = process_message.s(message("c-1")).set(countdown=600)
    frozen = sig.freeze()
    result = sig.apply_async()
    assert result.id == frozen.id and result.state == "SCHEDULED"
    assert process_message.s(message("c-2")).set(countdown=600).delay().id == "c-2"
    grouped = group(process_message.s(message(f"g-{i}")).set(countdown=600)
                    for i in range(3)).apply_async()
    assert [r.state for r in grouped.results] == ["SCHEDULED"] * 3
    with pytest.raises(InvalidSchedule, match=r"^chain is not kept"):  # the rest would be lost
        chain(process_message.s(message("c-3")).set(countdown=600),
              process_message.si(message("c-4"))).apply_async()
    got: list[Any] = []
    far = datetime.now(UTC) + timedelta(days=1)
    store_in_use.dispatch("short", 10, far, far, got.extend)
    assert sorted(c.job_key for c in got) == sorted(
        [frozen.id, "c-2", *(r.id for r in grouped.results)])
