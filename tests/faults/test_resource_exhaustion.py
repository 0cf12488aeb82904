"""Services that are up but refuse for want of resources: Redis at maxmemory with
``noeviction`` (every write refused "OOM"), a RabbitMQ resource alarm (publishers
blocked), PostgreSQL at max_connections (SQLSTATE 53300). Each is an outage: work
waits, is said once, loses nothing, runs once and resumes by itself. Private
instances only (tests.support.private_*); the shared services are never touched.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from kombu import Connection

import routing.routed
from config.errors import (
    BrokerBlocked,
    LockUnavailable,
    ServiceUnavailable,
    StoreUnavailable,
    StoreUnusable,
)
from config.settings import settings
from routing import redis_client
from routing.broker import queue_depth
from routing.queues import TASK_EXCHANGE, declare_topology
from routing.reseq.state import Resequencer
from scheduler.publisher import ConfirmingPublisher
from scheduler.service import open_store
from scheduler.store.migrate import upgrade
from scheduler.store.worker_store import check_store_at_start
from scheduler.task_message import TaskMessage
from tasks.app import RecurCelery, celery_config
from tasks.distlock import runtime as lock_runtime
from tasks.distlock.broken import LockRefused
from tasks.distlock.runtime import LeaseKeeper, Runtime
from tasks.distlock.store import LockStore, new_token
from tasks.flow import limiter
from tasks.flow.rates import parse_rate
from tasks.process import process_message
from tests.support import services
from tests.support.distlock_checks import INCLUDE, ended, message
from tests.support.locked_tasks import locked_work, read_runs
from tests.support.private_postgres import private_postgres
from tests.support.private_redis import PrivateRedis
from tests.support.private_services import PrivateRabbit, private_rabbit
from tests.support.processes import wait_for
from tests.support.rabbit_cluster import rabbitmqctl

pytestmark = pytest.mark.services


@pytest.fixture
def full_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    """A private Redis whose maxmemory is just above what it uses, filled past it:
    with noeviction every write is refused (OOM); reads still answer."""
    server = PrivateRedis(tmp_path, ("--maxmemory-policy", "noeviction"))
    server.start()
    client = server.client
    client.config_set("maxmemory", int(client.info("memory")["used_memory"]) + 200_000)
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        for i in range(100):
            client.set(f"fill:{i}", "x" * 50_000)
    yield server
    server.stop()


def free(server: PrivateRedis) -> None:
    server.client.config_set("maxmemory", 0)


def oom_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "event=redis_oom" in line]


def test_redis_oom_is_an_outage_said_once_and_passes_when_memory_is_freed(
    full_redis: PrivateRedis, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redis_client, "_oom_said", [-redis_client.OOM_SAY_EVERY])
    cfg = settings()
    client = redis.Redis.from_url(full_redis.url, decode_responses=True, socket_timeout=5)
    store = LockStore(client, cfg.key_prefix)
    reseq = Resequencer(client, cfg)
    rate = parse_rate("5/s")
    caplog.set_level(logging.INFO, "recur.redis")

    def take_lock() -> Any:
        return store.acquire("oom-user", new_token(), 10, 0, "t1", "{}", 5.0)

    for _ in range(3):  # the lock, the limiter and the resequencer, each a few times
        with pytest.raises(LockUnavailable) as lock_error:
            take_lock()
        # An outage, not "this user's keys are wrong" (LockRefused, logged at ERROR).
        assert not isinstance(lock_error.value, LockRefused)
        assert "out of memory" in str(lock_error.value)
        assert redis_client.out_of_memory(lock_error.value)
        with pytest.raises(ServiceUnavailable) as limit_error:
            limiter.take(client, cfg.key_prefix, "oom-key", "j1", "short", rate)
        assert not isinstance(limit_error.value, limiter.LimitRefused)
        assert "out of memory" in str(limit_error.value)
        with pytest.raises(ServiceUnavailable, match="out of memory"):
            reseq.assign("oom-dest", ["m1"])
    [line] = oom_lines(caplog.text)  # one line for nine refusals, naming the cause
    assert "maxmemory" in line and "noeviction" in line
    assert store.holder("oom-user") is None  # nothing half-written

    free(full_redis)  # memory freed: every call works again, no restart
    assert take_lock().status == 1  # ACQUIRED
    assert limiter.take(client, cfg.key_prefix, "oom-key", "j1", "short", rate).allowed
    assert reseq.assign("oom-dest", ["m1"]) == 1


def test_locked_jobs_wait_out_a_full_redis_and_each_runs_once(
    broker: Connection,
    start_worker: Any,
    redis_client: redis.Redis,
    full_redis: PrivateRedis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cfg = settings()
    store = LockStore(
        redis.Redis.from_url(full_redis.url, decode_responses=True, socket_connect_timeout=1),
        cfg.key_prefix,
    )
    monkeypatch.setattr(
        lock_runtime, "_current", Runtime(cfg, store, LeaseKeeper(store, cfg), os.getpid())
    )
    env = {
        "RECUR_REDIS_URL": full_redis.url,
        "RECUR_RESULT_BACKEND": services.REDIS_URL,
        "RECURTEST_RECORD_URL": services.REDIS_URL,
    }
    child, _ = start_worker("short", concurrency=2, env=env, args=INCLUDE)
    ids = set()
    for i in range(3):
        sent = message(f"oom-{os.getpid()}", i)
        locked_work.delay(sent)
        ids.add(sent["id"])
    wait_for(
        lambda: child.log().count("re-enqueued in") >= 6,
        30,
        "the jobs to be re-enqueued while Redis is full",
    )
    assert not ended(redis_client, ids)
    free(full_redis)
    wait_for(lambda: ended(redis_client, ids) == ids, 30, "every job once memory is freed")
    log = child.log()
    said = [line.split("]")[0].split("/")[-1] for line in oom_lines(log)]
    # Once per pool process (two), not once per delivery (six or more).
    assert 1 <= len(said) == len(set(said)) <= 2, log[-3000:]
    assert "Traceback" not in log and "ERROR/" not in log
    assert queue_depth(broker, "short.dead") == 0  # a live message is never dead-lettered
    starts = [e["id"] for e in read_runs(redis_client) if e["ev"] == "start" and e["id"] in ids]
    # Each ran exactly once. (Published while Redis was full, they were numbered on
    # arrival, as in an outage: docs/distlock.md.)
    assert sorted(starts) == sorted(ids)


@pytest.fixture(scope="module")
def rabbit() -> Iterator[PrivateRabbit]:
    """One private node for the module (starting one takes seconds)."""
    with private_rabbit() as node:
        with Connection(node.url) as conn:
            declare_topology(conn, replace(settings(), broker_url=node.url))
        try:
            yield node
        finally:  # a clean stop, quick: the helper's SIGTERM took 30 s here
            subprocess.run(
                ["rabbitmqctl", "-n", node.node.name, "stop"], capture_output=True, timeout=60
            )


def alarm(node: PrivateRabbit, on: bool) -> None:
    """A memory resource alarm on the private node (on), or none (off)."""
    rabbitmqctl(node.node.name, "set_vm_memory_high_watermark", "0.0000001" if on else "0.4")


def depth(node: PrivateRabbit, queue: str) -> int:
    with Connection(node.url) as conn:
        return int(conn.default_channel.queue_declare(queue, passive=True).message_count)


def test_a_blocked_broker_is_said_once_and_a_publish_fails_naming_it(
    rabbit: PrivateRabbit, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "recur.broker")
    publisher = ConfirmingPublisher(rabbit.url, TASK_EXCHANGE.name, confirm_timeout=2)
    before = depth(rabbit, "short")

    def publish(key: str) -> None:
        publisher.publish_messages(
            [
                (
                    TASK_EXCHANGE.name,
                    "short",
                    TaskMessage(key, b"[[], {}, {}]", {"id": key, "task": "tests.count_run"}),
                )
            ]
        )

    alarm(rabbit, True)
    try:
        for attempt in range(2):  # the scheduler's loop: fail, reconnect, try again
            publisher.connect()
            with pytest.raises(BrokerBlocked, match="resource alarm"):
                publish(f"blocked-{attempt}")
        blocked = [r for r in caplog.records if "event=broker_blocked" in r.message]
        assert len(blocked) == 1 and blocked[0].levelno == logging.WARNING  # once an alarm
    finally:
        alarm(rabbit, False)
    publisher.connect()
    publish("after")  # confirmed: the broker takes publishes again
    publisher.close()
    assert [r for r in caplog.records if "event=broker_unblocked" in r.message]
    # Nothing dropped: the copies sent while blocked arrive when it clears (a scheduler's
    # are stale by their lease stamp and dropped by the worker), and the new one.
    wait_for(lambda: depth(rabbit, "short") >= before + 1, 10, "the message after the alarm")


def test_apply_async_to_a_blocked_broker_waits_to_a_deadline_then_names_the_alarm(
    rabbit: PrivateRabbit, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, "recur.broker")
    monkeypatch.setattr(routing.routed, "CONFIRM_TIMEOUT", 2.0)
    producer = RecurCelery("recur-blocked", set_as_current=False)
    producer.config_from_object(celery_config(replace(settings(), broker_url=rabbit.url)))
    producer.send_task(
        "tests.count_run", args=[message("blocked-u", 0)], queue="short"
    )  # connected
    before = depth(rabbit, "short")
    outcome: list[Any] = []

    def send(task_id: str) -> None:
        try:
            producer.send_task(
                "tests.count_run", args=[message("blocked-u", 1)], task_id=task_id, queue="short"
            )
            outcome.append("sent")
        except Exception as exc:  # what the caller sees
            outcome.append(exc)

    alarm(rabbit, True)
    try:
        for task_id in ("blocked-a", "blocked-b"):
            caller = threading.Thread(target=send, args=(task_id,), daemon=True)
            caller.start()
            caller.join(20)  # it used to wait for the confirm forever
            assert not caller.is_alive(), "apply_async still waiting while the broker blocks it"
        assert len(outcome) == 2 and all(isinstance(o, BrokerBlocked) for o in outcome), outcome
        assert "resource alarm" in str(outcome[1]) and "blocked-b" in str(outcome[1])
        assert len([r for r in caplog.records if "event=broker_blocked" in r.message]) == 1
    finally:
        alarm(rabbit, False)
    send("after")
    assert outcome[-1] == "sent"
    # Nothing silently dropped: what was sent while blocked arrives once it clears.
    wait_for(lambda: depth(rabbit, "short") >= before + 1, 10, "the messages after the alarm")
    producer.close()


def test_postgres_at_max_connections_is_an_outage_not_a_bad_url(use_store: Any) -> None:
    with private_postgres("-c max_connections=3 -c superuser_reserved_connections=0") as pg:
        engine_url = pg.url
        from sqlalchemy import create_engine

        engine = create_engine(engine_url)
        upgrade(engine)
        engine.dispose()
        held = []
        with pytest.raises(psycopg.OperationalError, match="too many clients"):
            for _ in range(10):
                held.append(psycopg.connect(f"postgresql://postgres@127.0.0.1:{pg.port}/postgres"))
        try:
            # A worker starting: an outage it rides out, not StoreUnusable (exit 2).
            with pytest.raises(StoreUnavailable, match="too many clients") as at_start:
                check_store_at_start(engine_url)
            assert not isinstance(at_start.value, StoreUnusable)
            # A command: one line naming the cause, exit 2, no traceback.
            env = {**os.environ, "RECUR_DATABASE_URL": engine_url}
            done = subprocess.run(
                [".venv/bin/recur", "jobs", "list"],
                env=env,
                text=True,
                capture_output=True,
                timeout=60,
            )
            assert done.returncode == 2 and "Traceback" not in done.stderr
            [line] = done.stderr.strip().splitlines()
            assert line.startswith("recur: ") and "too many clients" in line
            # A producer storing a call: a clear StoreUnavailable, nothing written.
            use_store(engine_url)
            with pytest.raises(StoreUnavailable, match="too many clients"):
                process_message.apply_async((message("pg-u", 0),), countdown=600)
            # The scheduler waits for a connection (retrying), and opens once one is free.
            stopping, opened = threading.Event(), []
            cfg = replace(settings(), database_url=engine_url)
            waiter = threading.Thread(target=lambda: opened.append(open_store(cfg, stopping)))
            waiter.start()
            waiter.join(1.0)
            assert waiter.is_alive()  # still waiting: not a "broken URL" exit
        finally:
            for conn in held:
                conn.close()
        waiter.join(20)
        stopping.set()
        assert opened and opened[0] is not None
        opened[0].close()
        process_message.apply_async((message("pg-u", 1),), countdown=600)  # works again
