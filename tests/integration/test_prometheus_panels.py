"""Every query of the shipped Grafana dashboard answers from a real Prometheus.

A private Prometheus (Debian's package, tests/support/prometheus.py) scrapes, every
second and with the shipped config's job names, the exporter, the scheduler, a
``recur worker short`` (prefork: its children's metrics meet in its multiprocess
directory) and a ``recur worker outbound`` (threads). Real work runs through them on
a real store and broker: stored jobs dispatched on time and two minutes late, a
stale copy dropped, a user's second job parked behind its lock, resequenced messages
sent to a real receiver and one refused (422) into the destination's dead letter.
Then every panel's every query is evaluated through /api/v1/query and must return
at least one series; the lateness, run time and hold histograms must hold what ran.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kombu import Connection

import tests.support.locked_tasks as locked_tasks
from config.settings import Settings, load_settings
from routing.reseq.intake import submit
from scheduler.calls import utcnow
from scheduler.store import DueStore
from scheduler.wire import DISPATCH_HEADER, micros
from tasks import process_message
from tests.integration.test_exporter import job
from tests.support import services
from tests.support.processes import Child, recur_argv, spawn, wait_for, wait_for_worker
from tests.support.prometheus import Prometheus, start_prometheus
from tests.support.receiver import Receiver
from tests.support.resequencer_rig import rig_environment

pytestmark = pytest.mark.services

DASHBOARD = services.ROOT / "config" / "monitoring" / "grafana" / "dashboards" / "recur.json"
DESTINATION = "crm"
#: Panel queries that may answer nothing here, each with why. Keep it empty unless a
#: metric really cannot appear in a test run (none does today).
MAY_BE_EMPTY: dict[str, str] = {}
LATE, ON_TIME = 2, 3
#: This test's own locked user (and its jobs' ids): unique, as the runs list is shared.
LOCKED = f"u-lock-panels-{os.getpid()}"


def panel_queries() -> list[tuple[str, str]]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return [(panel["title"], target["expr"]) for panel in doc["panels"]
            for target in panel["targets"]]


@pytest.fixture
def children() -> Iterator[list[Child]]:
    started: list[Child] = []
    yield started
    for child in reversed(started):
        child.stop()


def message(key: str, user: str, **payload: Any) -> dict[str, Any]:
    return {"id": key, "user_id": user, "bucket": "short", "payload": payload}


def test_every_dashboard_query_answers_from_a_real_prometheus(
        celery_app: Any, broker: Connection, redis_client: redis.Redis, fresh_pg_url: str,
        children: list[Child], tmp_path: Path) -> None:
    with Receiver() as receiver:
        ports = {name: services.free_port()
                 for name in ("exporter", "scheduler", "short", "outbound")}
        env = {**os.environ, **services.test_environment(),
               **rig_environment(receiver, [DESTINATION]),
               "RECUR_IMPORTS": "tests.support.resequencer_work,tests.support.locked_tasks",
               "RECUR_DATABASE_URL": fresh_pg_url, "RECUR_WORK_SCALE": "0",
               "RECUR_METRICS_REFRESH": "0.5", "RECUR_SCHEDULER_INTERVAL": "0.1"}
        cfg = load_settings(env)

        def start(name: str, *args: str) -> Child:
            child = spawn(name, recur_argv(*args), tmp_path / "logs",
                          {**env, "RECUR_METRICS_PORT": str(ports[name])}, cwd=services.ROOT)
            children.append(child)
            return child

        for bucket in ("short", "outbound"):
            worker = start(bucket, "worker", bucket)
            wait_for_worker(celery_app, worker, f"{bucket}@{socket.gethostname()}", 90)
        start("exporter", "exporter")
        start("scheduler", "scheduler")
        prometheus = start_prometheus({
            "recur-exporter": [f"127.0.0.1:{ports['exporter']}"],
            "recur-processes": [f"127.0.0.1:{ports[n]}" for n in ("scheduler", "short",
                                                                 "outbound")]},
            tmp_path / "prometheus")
        children.append(prometheus.child)
        wait_for(lambda: list(prometheus.targets().values()).count("up") == 4, 60,
                 "prometheus to scrape all four targets")

        run_the_work(fresh_pg_url, cfg, receiver, redis_client, children)
        every_panel_answers(prometheus)
        histograms_hold_what_ran(prometheus)


def run_the_work(url: str, cfg: Settings, receiver: Receiver, client: redis.Redis,
                 children: list[Child]) -> None:
    """Stored jobs (some two minutes late), a stale copy, a parked job, resequenced sends
    and a refusal; returns once all of it has happened."""
    store = DueStore.open(url)
    try:
        store.schedule([job(f"late-{i}", "short", -120) for i in range(LATE)]
                       + [job(f"due-{i}", "short", -0.5) for i in range(ON_TIME)], utcnow())
        other_work(cfg, receiver)
        wait_for(lambda: all_done(store, receiver, client, children), 90,
                 "the stored jobs, the locked jobs and the resequenced sends")
    finally:
        store.close()


def other_work(cfg: Settings, receiver: Receiver) -> None:
    """A stale copy, two jobs of one user (the second parks), resequenced messages."""
    now_us = micros(utcnow())
    process_message.apply_async((message("no-such-job", "u-stale"),),
                                headers={DISPATCH_HEADER: ["no-such-job", 7, now_us, now_us]})
    for i in (1, 2):  # the second waits for the first's lock: parked, then handed over
        locked_tasks.locked_work.apply_async((message(f"{LOCKED}-{i}", LOCKED, ms=1500),))
    receiver.refuse(DESTINATION, 2, 422)
    for i in (1, 2, 3):
        submit(DESTINATION, message(f"r{i}", "u-reseq"), cfg)


def all_done(store: DueStore, receiver: Receiver, client: redis.Redis,
             children: list[Child]) -> bool:
    if any(c.proc.poll() is not None for c in children):
        raise RuntimeError("a process exited:\n" + "\n".join(
            f"--- {c.name}\n{c.log()[-2000:]}" for c in children))
    # Other tests on the other xdist worker share the runs list: count only ours.
    ends = [r for r in locked_tasks.read_runs(client)
            if r["ev"] == "end" and r["user"] == LOCKED]
    return (sorted(set(receiver.seqs(DESTINATION))) == [1, 3]
            and receiver.refused_seqs(DESTINATION, 422) == [2] and len(ends) == 2
            and sum(s.scheduled + s.dispatched for s in store.stats(utcnow()).values()) == 0)


def every_panel_answers(prometheus: Prometheus) -> None:
    """Wait (scrape by scrape) until every panel query returns a series."""
    queries = panel_queries()
    empty = {(title, expr) for title, expr in queries}

    def all_answer() -> bool:
        for title, expr in sorted(empty):
            if prometheus.query(expr):
                empty.discard((title, expr))
        return not {(t, e) for t, e in empty if t not in MAY_BE_EMPTY}

    try:
        wait_for(all_answer, 90, "every dashboard query to return a series", interval=1)
    except TimeoutError:
        pytest.fail("dashboard queries without a series after 90 s of scrapes:\n"
                    + "\n".join(f"  {t}: {e}" for t, e in sorted(empty))
                    + f"\ntargets: {prometheus.targets()}", pytrace=False)
    assert len(queries) >= 19 and not empty - {(t, e) for t, e in queries if t in MAY_BE_EMPTY}


def value(prometheus: Prometheus, expr: str) -> float:
    found = prometheus.query(expr)
    return sum(float(sample["value"][1]) for sample in found)


def histograms_hold_what_ran(prometheus: Prometheus) -> None:
    """Lateness counts every stored run (the late ones past a minute), the prefork
    children's run times reach the worker's endpoint, the sender's holds its sends."""
    late = "recur_worker_lateness_seconds"
    stored = f'{late}_count{{task="tasks.process_message",bucket="short"}}'
    within_a_minute = (f'{late}_bucket{{task="tasks.process_message",bucket="short",'
                       f'le=~"60(\\\\.0)?"}}')

    def counted() -> bool:
        return (value(prometheus, stored) >= LATE + ON_TIME
                and value(prometheus, 'recur_resequencer_hold_seconds_count'
                          f'{{destination="{DESTINATION}"}}') >= 2
                and value(prometheus, 'recur_worker_task_seconds_count'
                          '{task="tests.locked_work"}') >= 2)

    wait_for(counted, 30, "the histograms' counts in prometheus", interval=0.5)
    assert value(prometheus, stored) == LATE + ON_TIME  # not the stale copy, not a park
    assert value(prometheus, stored) - value(prometheus, within_a_minute) == LATE
