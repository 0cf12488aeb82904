"""Every long-running recur process serves its own /metrics on RECUR_METRICS_PORT, and
logs quietly: the scheduler one INFO summary per interval, a worker that cannot reach its
broker says so at once."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kombu import Connection

from scheduler.calls import utcnow
from scheduler.store import DueStore
from tasks import process_message
from tests.integration.test_exporter import job, parse
from tests.support import services
from tests.support.processes import Child, recur_argv, spawn, wait_for

pytestmark = pytest.mark.services


@pytest.fixture
def start_recur(tmp_path: Path) -> Iterator[Any]:
    children: list[Child] = []

    def start(name: str, args: list[str], env: dict[str, str]) -> Child:
        full = {**os.environ, **services.test_environment(), **env}
        child = spawn(name, recur_argv(*args), tmp_path / "logs", full, cwd=services.ROOT)
        children.append(child)
        return child

    yield start
    for child in children:
        child.stop()


def metric(child: Child, port: int, name: str, **labels: str) -> float | None:
    if child.proc.poll() is not None:
        raise RuntimeError(f"{child.name} exited:\n{child.log()[-3000:]}")
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except httpx.TransportError:
        return None
    return parse(text).get((name, tuple(sorted(labels.items()))))


def test_worker_and_scheduler_serve_their_own_metrics(
        broker: Connection, fresh_pg_url: str, start_recur: Any) -> None:
    worker_port, scheduler_port = services.free_port(), services.free_port()
    base = {"RECUR_DATABASE_URL": fresh_pg_url, "RECUR_WORK_SCALE": "0"}
    worker = start_recur("worker", ["worker", "short"],
                         {**base, "RECUR_METRICS_PORT": str(worker_port)})
    scheduler = start_recur("scheduler", ["scheduler"],
                            {**base, "RECUR_METRICS_PORT": str(scheduler_port)})
    store = DueStore.open(fresh_pg_url)
    try:
        store.schedule([job("due-1", "short", -1)], utcnow())
    finally:
        store.close()
    wait_for(lambda: (metric(scheduler, scheduler_port, "recur_scheduler_dispatched_total",
                             bucket="short", kind="due") or 0) >= 1, 60,
             "the scheduler to count its dispatch")
    process_message.delay({"id": "direct-1", "user_id": "u", "bucket": "short", "payload": {}})
    labels = {"bucket": "short", "task": "tasks.process_message", "state": "SUCCESS"}
    wait_for(lambda: (metric(worker, worker_port, "recur_worker_tasks_total", **labels)
                      or 0) >= 2, 90, "the worker's child processes' runs on its endpoint")


def test_idle_scheduler_logs_one_summary_per_interval_not_a_line_per_pass(
        live_services: None, fresh_pg_url: str, start_recur: Any) -> None:
    scheduler = start_recur("scheduler", ["scheduler"], {
        "RECUR_DATABASE_URL": fresh_pg_url, "RECUR_LOG_LEVEL": "INFO",
        "RECUR_STATUS_INTERVAL": "1", "RECUR_SCHEDULER_INTERVAL": "0.05"})
    summary = r"INFO/recur.scheduler\] last \d+s:"
    wait_for(lambda: len(re.findall(summary, scheduler.log())) >= 3, 60, "three summary lines")
    info = [line for line in scheduler.log().splitlines() if "INFO/recur" in line]
    # started, then only summaries: ~60 idle passes happened meanwhile
    assert all("last " in line or "scheduler started" in line for line in info), info
    assert "lag 0.0s" in info[-1]


def test_worker_waiting_for_its_broker_says_so_at_once(start_recur: Any) -> None:
    worker = start_recur("worker", ["worker", "short"], {
        "RECUR_BROKER_URL": f"amqp://guest:guest@127.0.0.1:{services.free_port()}//"})
    wait_for(lambda: "worker waiting for it" in worker.log(), 20,
             "the worker to say it waits for its broker")
    assert "unreachable" in worker.log() and "guest:guest" not in worker.log()
