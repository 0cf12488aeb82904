"""``apply_async``/``retry`` on our tasks: long delays and job keys go to the store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from config.errors import InvalidMessage, InvalidSchedule, UnknownBucket
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
