"""Forged control headers against real worker processes: each is refused by name
(dead-lettered with the reason), never run, and costs nothing else.

A client that can publish to the broker writes what it likes into a message's
headers; these tests publish such messages through the app, as that client
would, beside a user's real jobs.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis
from kombu import Connection

from config.buckets_in_use import BUCKETS_BY_NAME
from config.errors import UnknownStep
from config.settings import Settings, load_settings, settings
from routing.deadletter import DeadMessage, list_dead
from routing.reseq.intake import submit
from routing.reseq.state import Resequencer
from scheduler.store import Claimed, DueStore, Job
from scheduler.wire import DISPATCH_HEADER, micros
from tasks.broker_ops import stored_error
from tasks.distlock import runtime as lock_runtime
from tasks.distlock.job import SEQ, SINCE
from tests.support import fault_tasks
from tests.support.distlock_checks import (
    INCLUDE,
    assert_one_at_a_time_in_order,
    ended,
    message,
    runs_by_user,
)
from tests.support.hostile_tasks import NOT_A_STEP, calls_key
from tests.support.locked_tasks import locked_work, read_runs
from tests.support.processes import wait_for
from tests.support.services import ROOT

pytestmark = pytest.mark.services

KEY = "forge-test-signing-key-0123456789abcdef"
SHORT = BUCKETS_BY_NAME["short"]


@pytest.fixture
def publisher_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """Give this (publishing) process other RECUR_* settings for one test."""
    def use(**env: str) -> None:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        settings.cache_clear()
        monkeypatch.setattr(lock_runtime, "_current", None)  # a lock runtime with them

    yield use
    monkeypatch.undo()
    settings.cache_clear()


def dead(celery_app: Any, broker: Connection) -> dict[str, DeadMessage]:
    """The short bucket's dead letters by task id, each with its stored error."""
    found = list_dead(broker, SHORT, lambda task_id: stored_error(celery_app, task_id))
    return {d.task_id: d for d in found}


def wait_dead(celery_app: Any, broker: Connection, task_id: str) -> DeadMessage:
    wait_for(lambda: task_id in dead(celery_app, broker), 30, f"{task_id} dead-lettered")
    return dead(celery_app, broker)[task_id]


def started(client: redis.Redis, job_id: str) -> bool:
    return any(e["id"] == job_id for e in read_runs(client))


def test_a_forged_lock_number_is_dead_lettered_and_the_users_later_jobs_run(
        broker: Connection, celery_app: Any, start_worker: Any,
        redis_client: redis.Redis) -> None:
    start_worker("short", concurrency=2, args=INCLUDE)
    user = f"forge-{uuid.uuid4().hex[:6]}"
    locked_work.delay(message(user, 0, ms=300))
    forged = locked_work.apply_async((message(user, 99),), headers={SEQ: 10**12})
    for i in range(1, 4):
        locked_work.delay(message(user, i))
    order = [f"{user}-{i}" for i in range(4)]
    wait_for(lambda: ended(redis_client, set(order)) == set(order), 30, "the real jobs")
    assert_one_at_a_time_in_order(runs_by_user(redis_client, {user})[user], order)
    letter = wait_dead(celery_app, broker, forged.id)
    assert letter.error.startswith("InvalidControlHeader: control header recur_lock_seq: ")
    assert "#1000000000000," in letter.error and "never given out" in letter.error
    assert not started(redis_client, f"{user}-99")
    # Later jobs of the user still run: the forged number moved nothing.
    locked_work.delay(message(user, 4))
    wait_for(lambda: f"{user}-4" in ended(redis_client, {f"{user}-4"}), 30, "a later job")


def test_malformed_lock_headers_are_refused_by_name(
        broker: Connection, celery_app: Any, start_worker: Any,
        redis_client: redis.Redis) -> None:
    start_worker("short", concurrency=2, args=INCLUDE)
    user = f"bad-{uuid.uuid4().hex[:6]}"
    cases = {SEQ: -5, SINCE: "yesterday"}
    sent = {name: locked_work.apply_async((message(user, i),), headers={name: value})
            for i, (name, value) in enumerate(cases.items())}
    for name, result in sent.items():
        error = wait_dead(celery_app, broker, result.id).error
        assert error.startswith(f"InvalidControlHeader: control header {name}: must be"), error
    assert not any(started(redis_client, f"{user}-{i}") for i in range(len(cases)))


def dispatched(url: str, key: str) -> Claimed:
    """Job ``key`` (tests.count_run) scheduled and dispatched in the store at ``url``."""
    store = DueStore.open(url)
    now = datetime.now(UTC)
    msg = {"id": key, "user_id": "u", "bucket": "short", "payload": None}
    store.schedule([Job(key, "tests.count_run", "short",
                        json.dumps({"args": [msg], "kwargs": {}}), now)], now)
    sent: list[Claimed] = []
    assert store.dispatch("short", 10, now, now + timedelta(minutes=30), sent.extend) == 1
    store.close()
    return sent[0]


def copy_of(row: Claimed, header: list[Any]) -> Any:
    msg = {"id": row.job_key, "user_id": "u", "bucket": "short", "payload": None}
    return fault_tasks.count_run.apply_async((msg,), headers={DISPATCH_HEADER: header})


def test_a_dispatch_header_without_its_lease_stamp_is_refused_not_matched(
        broker: Connection, celery_app: Any, start_worker: Any, sqlite_url: str,
        redis_client: redis.Redis) -> None:
    start_worker("short", concurrency=2, env={"RECUR_DATABASE_URL": sqlite_url})
    row = dispatched(sqlite_url, f"nolease-{uuid.uuid4().hex[:6]}")
    copy = copy_of(row, [row.job_key, row.token, None])
    error = wait_dead(celery_app, broker, copy.id).error
    assert "control header recur_dispatch: it carries no lease stamp" in error, error
    assert redis_client.get(fault_tasks.attempts_key(row.job_key)) is None, "it ran"
    store = DueStore.open(sqlite_url)
    assert store.live_dispatch(row.job_key, wait=False) == (row.token, row.lease_until)
    # The same copy with its lease stamp is the live dispatch: it runs and finishes.
    copy_of(row, [row.job_key, row.token, micros(row.lease_until)])
    wait_for(lambda: store.live_dispatch(row.job_key, wait=False) is None, 30, "the finish")
    assert int(redis_client.get(fault_tasks.attempts_key(row.job_key)) or 0) == 1
    store.close()


def test_with_a_signing_key_unsigned_and_badly_signed_headers_are_refused(
        broker: Connection, celery_app: Any, start_worker: Any, sqlite_url: str,
        redis_client: redis.Redis, publisher_env: Callable[..., None]) -> None:
    start_worker("short", concurrency=2, args=INCLUDE,
                 env={"RECUR_SIGNING_KEY": KEY, "RECUR_DATABASE_URL": sqlite_url})
    user = f"signed-{uuid.uuid4().hex[:6]}"
    row = dispatched(sqlite_url, f"signed-{uuid.uuid4().hex[:6]}")
    header = [row.job_key, row.token, micros(row.lease_until)]
    # Forged by a client without the key: well-formed, in-range headers (a number
    # that was given out), unsigned or signed with another key.
    given = lock_runtime.runtime().store.submit(f"{user}-other")  # another user's number
    unsigned_job = locked_work.apply_async((message(user, 90),), headers={SEQ: given})
    unsigned_copy = copy_of(row, header)
    publisher_env(RECUR_SIGNING_KEY="another-key-of-forty-characters-000000")
    badly_signed = locked_work.apply_async((message(user, 91),), headers={SEQ: given})
    publisher_env(RECUR_SIGNING_KEY=KEY)  # recur's own publishers: accepted
    for i in range(3):
        locked_work.delay(message(user, i))
    order = [f"{user}-{i}" for i in range(3)]
    wait_for(lambda: ended(redis_client, set(order)) == set(order), 30, "the signed jobs")
    assert_one_at_a_time_in_order(runs_by_user(redis_client, {user})[user], order)
    expected = {unsigned_job.id: "recur_lock_seq: unsigned",
                unsigned_copy.id: "recur_dispatch: unsigned",
                badly_signed.id: "recur_lock_seq: bad signature"}
    for task_id, what in expected.items():
        error = wait_dead(celery_app, broker, task_id).error
        assert error.startswith(f"InvalidControlHeader: control header {what}"), error
    assert not started(redis_client, f"{user}-90") and not started(redis_client, f"{user}-91")
    store = DueStore.open(sqlite_url)
    assert store.live_dispatch(row.job_key, wait=False) == (row.token, row.lease_until)
    copy_of(row, header)  # signed by this process now: the live copy runs
    wait_for(lambda: store.live_dispatch(row.job_key, wait=False) is None, 30, "the finish")
    store.close()


def reseq_env() -> dict[str, str]:
    return {"RECUR_DESTINATIONS": "steps:http://127.0.0.1:9/steps",
            "RECUR_RESEQ_STEPS": "steps:tests.reseq_random_work",
            "RECUR_IMPORTS": "tests.support.resequencer_work,tests.support.hostile_tasks",
            "PYTHONPATH": str(ROOT)}


def test_a_step_not_named_for_the_destination_is_refused_at_submit_and_when_run(
        broker: Connection, celery_app: Any, start_worker: Any,
        redis_client: redis.Redis) -> None:
    from tasks.resequence import resequence_process

    start_worker("short", concurrency=2, env=reseq_env())
    cfg: Settings = load_settings({**os.environ, **reseq_env()})
    reseq = Resequencer(redis_client, cfg)
    msg = {"id": f"st-{uuid.uuid4().hex[:6]}", "user_id": "u", "bucket": "short",
           "payload": None}
    before = reseq.status("steps").next_seq
    for step in (NOT_A_STEP, "tasks.process_message", "tasks.resequence_send", "no.such"):
        with pytest.raises(UnknownStep, match=f"{step!r} is not destination 'steps'"):
            submit("steps", msg, cfg, step=step)
    assert reseq.status("steps").next_seq == before, "a refused message was numbered"
    # A message published by other means names a task that is not a step.
    seq = reseq.assign("steps", [msg["id"]])
    try:
        forged = resequence_process.apply_async((msg, "steps", seq), {"step": NOT_A_STEP})
        error = wait_dead(celery_app, broker, forged.id).error
    finally:
        with broker.channel() as channel:  # its set-aside entry kicks a sender: none here
            channel.queue_purge("outbound")
    assert error.startswith("UnknownStep: invalid message: step: 'tests.not_a_step' is not "
                            "destination 'steps'"), error
    assert int(redis_client.get(calls_key()) or 0) == 0, "the forged step ran"
