"""``recur exporter``: its figures match the store and the broker after a known workload,
and a scrape stays quick with 100k waiting rows (it reads no service)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from kombu import Connection
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from config import keys
from config.settings import load_settings
from routing.broker import inspect_queues
from routing.queues import TASK_EXCHANGE, all_queue_names
from scheduler.calls import utcnow
from scheduler.publisher import ConfirmingPublisher
from scheduler.store import DueStore, Job
from scheduler.wire import encode_call
from tasks.metrics.exporter import exporter_registry
from tasks.metrics.system import Refresher
from tests.support import services
from tests.support.processes import Child, recur_argv, spawn, wait_for
from tests.support.store_fixtures import PG_DSN, PG_SCHEMA

pytestmark = pytest.mark.services

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def job(key: str, bucket: str, due_in: float) -> Job:
    message = {"id": key, "user_id": "u-1", "bucket": bucket, "payload": {"n": 1}}
    return Job(key, "tasks.process_message", bucket,
               encode_call([message], {}, job_key=key, bucket=bucket),
               utcnow() + timedelta(seconds=due_in))


def known_workload(url: str, broker: Connection, redis_client: Any) -> None:
    """4 short jobs in an hour, 3 medium due (2 of them dispatched), 2 long due, 1 long
    dead letter, 3 lock parks and one waiting user."""
    store = DueStore.open(url)
    publisher = ConfirmingPublisher(services.BROKER_URL, TASK_EXCHANGE.name)
    try:
        now = utcnow()
        store.schedule([job(f"s{i}", "short", 3600) for i in range(4)]
                       + [job(f"m{i}", "medium", -30) for i in range(3)]
                       + [job(f"l{i}", "long", -60) for i in range(2)], now)
        assert store.dispatch("medium", 2, utcnow(), utcnow() + timedelta(hours=1),
                              publisher.publish) == 2
    finally:
        publisher.close()
        store.close()
    with broker.channel() as channel:
        channel.basic_publish(channel.prepare_message(b"dead"), exchange="",
                              routing_key="long.dead")
    prefix = services.KEY_PREFIX
    redis_client.delete(keys.lock_stats(prefix), keys.lock_wake(prefix))
    redis_client.hincrby(keys.lock_stats(prefix), "busy", 3)
    redis_client.zadd(keys.lock_wake(prefix), {"user-1": 1})


@pytest.fixture
def exporter_cfg(fresh_pg_url: str) -> Any:
    return load_settings({**services.test_environment(), "RECUR_DATABASE_URL": fresh_pg_url})


@pytest.fixture
def start_exporter(tmp_path: Path) -> Iterator[Any]:
    children: list[Child] = []

    def start(url: str) -> tuple[Child, str]:
        port = services.free_port()
        env = {**os.environ, **services.test_environment(), "RECUR_DATABASE_URL": url,
               "RECUR_METRICS_PORT": str(port), "RECUR_METRICS_REFRESH": "0.5"}
        child = spawn("exporter", recur_argv("exporter"), tmp_path / "logs", env,
                      cwd=services.ROOT)
        children.append(child)
        return child, f"http://127.0.0.1:{port}/metrics"

    yield start
    for child in children:
        child.stop()


def scrape_until(child: Child, url: str, ready: Any, timeout: float = 60) -> Samples:
    found: Samples = {}

    def check() -> bool:
        if child.proc.poll() is not None:
            raise RuntimeError(f"exporter exited:\n{child.log()[-3000:]}")
        try:
            reply = httpx.get(url, timeout=5)
        except httpx.TransportError:
            return False
        found.clear()
        found.update(parse(reply.text))
        return bool(ready(found))

    wait_for(check, timeout, "the exporter's figures", interval=0.25)
    return found


def test_exporter_values_match_the_store_and_the_broker(
        broker: Connection, redis_client: Any, exporter_cfg: Any, start_exporter: Any) -> None:
    url = exporter_cfg.database_url
    known_workload(url, broker, redis_client)
    refresher = Refresher(exporter_cfg)
    refresher.refresh()
    samples = parse(generate_latest(exporter_registry(refresher)).decode())
    refresher.stop()

    store = DueStore.open(url)
    try:
        stats = store.stats(utcnow())
    finally:
        store.close()
    queues = inspect_queues(services.BROKER_URL, all_queue_names())
    expected = {"short": (4, 0, 0), "medium": (1, 1, 2), "long": (2, 2, 0)}
    for bucket, (scheduled, due, dispatched) in expected.items():
        assert value(samples, "recur_jobs_scheduled", bucket=bucket) == scheduled == (
            stats[bucket].scheduled)
        assert value(samples, "recur_jobs_due", bucket=bucket) == due == stats[bucket].due
        assert value(samples, "recur_jobs_dispatched", bucket=bucket) == dispatched == (
            stats[bucket].dispatched)
        assert value(samples, "recur_jobs_due_capped", bucket=bucket) == 0
    assert value(samples, "recur_jobs_lag_seconds", bucket="short") == 0
    assert 55 <= value(samples, "recur_jobs_lag_seconds", bucket="long") < 600
    assert 25 <= value(samples, "recur_jobs_lag_seconds", bucket="medium") < 600
    for name, stats_of in queues.items():
        assert stats_of is not None
        assert value(samples, "recur_queue_messages", queue=name) == stats_of.messages
        assert value(samples, "recur_queue_consumers", queue=name) == stats_of.consumers
    assert value(samples, "recur_queue_messages", queue="medium") == 2  # the in-flight copies
    assert value(samples, "recur_dead_letter_messages", bucket="long") == 1
    assert value(samples, "recur_dead_letter_messages", bucket="short") == 0
    assert value(samples, "recur_lock_stats_total", event="busy") == 3
    assert value(samples, "recur_lock_waiting_users") == 1
    assert all(value(samples, "recur_exporter_up", source=s) == 1
               for s in ("store", "totals", "broker", "redis"))

    # The same figures from the real process, over HTTP.
    child, metrics_url = start_exporter(url)
    served = scrape_until(child, metrics_url, lambda s: (
        "recur_jobs_dispatched", (("bucket", "medium"),)) in s)
    assert value(served, "recur_jobs_dispatched", bucket="medium") == 2
    assert value(served, "recur_dead_letter_messages", bucket="long") == 1


def seed_rows(count: int) -> None:
    """``count`` waiting short jobs, one in ten due, inserted by the server."""
    message = encode_call([{"id": "j", "user_id": "u", "bucket": "short", "payload": {}}], {},
                          job_key="j", bucket="short")
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f"SET search_path = {PG_SCHEMA}")
        conn.execute("INSERT INTO due_tasks (name) VALUES ('tasks.process_message') "
                     "ON CONFLICT (name) DO NOTHING")
        conn.execute(
            "INSERT INTO due_jobs (job_key, task_id, bucket, args, due_at) "
            "SELECT 'j' || i, (SELECT code FROM due_tasks WHERE name = 'tasks.process_message'),"
            " 'short', %s, now() + CASE WHEN i %% 10 = 0 THEN interval '-1 minute' "
            "ELSE interval '1 hour' END FROM generate_series(1, %s) AS i", (message, count))
        conn.execute("ANALYZE due_jobs")


#: A scrape renders figures already in memory: it must not wait for the store.
SCRAPE_DEADLINE = 1.0


def test_scrape_at_100k_rows_returns_within_the_deadline(
        live_services: None, fresh_pg_url: str, start_exporter: Any) -> None:
    seed_rows(100_000)
    child, url = start_exporter(fresh_pg_url)
    scrape_until(child, url, lambda s: s.get(
        ("recur_jobs_scheduled", (("bucket", "short"),))) == 100_000, timeout=90)
    took = []
    for _ in range(20):
        t0 = time.monotonic()
        reply = httpx.get(url, timeout=10)
        took.append(time.monotonic() - t0)
        assert reply.status_code == 200
    assert max(took) < SCRAPE_DEADLINE, took
    samples = parse(reply.text)
    assert value(samples, "recur_jobs_due", bucket="short") == 10_000
