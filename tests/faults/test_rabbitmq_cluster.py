"""recur on a three-node RabbitMQ cluster: quorum queues replicated on every node, a
scheduler and workers given the broker URL list for fail-over, and the node that
leads the bucket queue first stopped (``rabbitmqctl stop_app``), brought back,
then the node leading it next killed (``kill -9``), all mid-run. Every job runs
all its runs, none is lost, a run is repeated only where the broker redelivered
it after a connection loss, and nobody restarts the scheduler or the workers."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from kombu import Connection

from config.settings import load_settings
from routing.queues import declare_topology
from scheduler.store import DueStore
from tests.support.fixtures import spawn_worker
from tests.support.processes import Child, wait_for
from tests.support.rabbit_cluster import RabbitCluster, rabbit_cluster, rabbitmqctl
from tests.support.scheduler_support import RunLog, recurring_jobs, wait_until_empty, worker_env

pytestmark = [pytest.mark.services, pytest.mark.timeout(420)]
JOBS = 300
RUNS = 10  # every 3 s: about 30 s of work, sized for two loaded cores
QUEUE = "short"


def test_cluster_failover_loses_nothing_and_repeats_only_redelivered_runs(
        fresh_pg_url: str, start_scheduler: Any, tmp_path: Path) -> None:
    with rabbit_cluster() as cluster:
        env = worker_env(fresh_pg_url, RECUR_BROKER_URL=cluster.urls)
        declare(cluster, env)
        members = cluster.queues(cluster.nodes[0])[QUEUE]
        assert members["type"] == "quorum"
        assert sorted(members["members"]) == sorted(n.name for n in cluster.nodes)
        workers: list[Child] = []
        try:
            run_through_failures(cluster, env, fresh_pg_url, start_scheduler, workers, tmp_path)
        finally:
            for worker in workers:
                worker.stop()


def run_through_failures(cluster: RabbitCluster, env: dict[str, str], store_url: str,
                         start_scheduler: Any, workers: list[Child], tmp_path: Path) -> None:
    workers += start_workers(cluster, env, tmp_path)
    store = DueStore.open(store_url)
    jobs = recurring_jobs(JOBS, datetime.now(UTC) - timedelta(seconds=1), every=3.0,
                          runs=RUNS, buckets=(QUEUE,))
    store.schedule(jobs, datetime.now(UTC))
    log = RunLog()
    scheduler = start_scheduler(env)
    total = JOBS * RUNS

    def runs_reach(share: float) -> None:
        wait_for(lambda: sum(log.poll().values()) >= total * share, 180,
                 f"{share:.0%} of the runs")

    runs_reach(0.15)
    stopped = cluster.leader(QUEUE, via=cluster.nodes[0])
    rabbitmqctl(stopped.name, "stop_app")  # a clean stop: its queues elect new leaders
    runs_reach(0.35)
    rabbitmqctl(stopped.name, "start_app")
    runs_reach(0.5)
    survivor = next(n for n in cluster.nodes if n is not stopped)
    killed = cluster.leader(QUEUE, via=survivor)
    killed.kill9()  # a crash: no goodbye, connections drop
    wait_for(lambda: all(log.poll()[j.job_key] >= RUNS for j in jobs), 240,
             f"every job to run {RUNS} times")
    wait_until_empty(store, 60)
    store.close()
    check_runs(log, [j.job_key for j in jobs])
    assert all(c.proc.poll() is None for c in (scheduler, *workers)), \
        "a process died instead of reconnecting"


def check_runs(log: RunLog, keys: list[str]) -> None:
    """Every job ran its RUNS runs (its row is gone: the last one finished it). A run is
    repeated only by a broker redelivery: a worker whose connection dropped mid-task
    had that task terminated (it cannot ack it), so the copy the broker delivers
    again is still the job's live one and runs again."""
    runs = log.poll()
    redelivered = Counter(c.message_id for c in log.entries if c.redelivered)
    assert all(runs[key] >= RUNS for key in keys), "a job missed a run"
    repeated = {key: runs[key] - RUNS for key in keys if runs[key] > RUNS}
    assert all(redelivered[key] >= extra for key, extra in repeated.items()), \
        f"a job ran again without a redelivery: {repeated}"


def declare(cluster: RabbitCluster, env: dict[str, str]) -> None:
    """recur's topology on the cluster (the scheduler declares it too when it connects)."""
    cfg = load_settings(env)
    with Connection(cluster.urls) as conn:
        declare_topology(conn, cfg)


def start_workers(cluster: RabbitCluster, env: dict[str, str], tmp_path: Path) -> list[Child]:
    """Two short-bucket workers on the URL list, each answering ping before use."""
    ping = Celery("cluster-ping", broker=cluster.urls, set_as_current=False)
    return [spawn_worker(ping, QUEUE, tmp_path / "logs", concurrency=2, env=env)[0]
            for _ in range(2)]
