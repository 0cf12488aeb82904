"""Idle cost: what a deployment with nothing to do costs in CPU.

The real processes a user runs: ``recur scheduler`` and ``recur worker <bucket>`` for
every bucket of the table, on an empty store (a private PostgreSQL schema), in a private
RabbitMQ vhost and Redis prefix. After ``--settle`` seconds (start-up, Celery's mingle),
``--repeats`` windows of ``--seconds`` each: the CPU of every process in each one's tree
(prefork children too), from /proc. The services' CPU they cause is reported apart:
the PostgreSQL backends of their connections exactly (found by application_name), and
RabbitMQ's and Redis's whole servers (shared with anything else on the machine, so an
upper bound on a busy machine).

    .venv/bin/python -m bench.bench_idle                          # 3 x 60 s (the lead)
    .venv/bin/python -m bench.bench_idle --seconds 20 --repeats 1 --allow-busy   # a look
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from bench import proc_stats
from bench.private_env import PrivateEnv, pg
from bench.results_io import write_result

ENVIRONMENT = PrivateEnv("idle")
APP_NAME = f"recur-bench-idle-{ENVIRONMENT.run}"
ENVIRONMENT.activate(RECUR_DATABASE_URL=f"{ENVIRONMENT.pg_url}&application_name={APP_NAME}")
ROOT = Path(__file__).resolve().parents[1]


def start(log_dir: Path) -> dict[str, Any]:
    """The scheduler and one worker per bucket, each answering (workers: a ping)."""
    from config.buckets_in_use import bucket_table
    from tasks.app import app
    from tests.support.processes import recur_argv, spawn, wait_for_worker

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    children = {"scheduler": spawn("scheduler", recur_argv("scheduler"), log_dir, env, ROOT)}
    host = socket.gethostname()
    for bucket in bucket_table().buckets:
        node = f"idle-{bucket.name}-{ENVIRONMENT.run}@{host}"
        children[bucket.name] = spawn(bucket.name, recur_argv("worker", bucket.name, "-n", node),
                                      log_dir, env, ROOT)
        wait_for_worker(app, children[bucket.name], node)
    return children


def backends() -> list[int]:
    """The PostgreSQL backends serving this deployment's connections."""
    return [int(r[0]) for r in pg(f"SELECT pid FROM pg_stat_activity "
                                  f"WHERE application_name = '{APP_NAME}'")]


def window(children: dict[str, Any], seconds: float) -> dict[str, Any]:
    """Cores used over ``seconds`` by each process tree and by the services."""
    trees = {name: proc_stats.tree(child.pid) for name, child in children.items()}
    groups = {**trees, "postgres_backends": backends(),
              "rabbitmq_server": proc_stats.named("beam.smp"),
              "redis_server": proc_stats.named("redis-server")}
    before = {name: proc_stats.cpu_snapshot(pids) for name, pids in groups.items()}
    t0 = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - t0
    used = {name: proc_stats.cpu_between(before[name], proc_stats.cpu_snapshot(pids))
            for name, pids in groups.items()}
    cores = {name: round(cpu / elapsed, 4) for name, cpu in used.items()}
    recur = sum(cores[name] for name in trees)
    return {"seconds": round(elapsed, 1), "recur_cores": round(recur, 4),
            "recur_percent_of_a_core": round(100 * recur, 2),
            "postgres_backends_cores": cores.pop("postgres_backends"),
            "rabbitmq_server_cores_shared": cores.pop("rabbitmq_server"),
            "redis_server_cores_shared": cores.pop("redis_server"),
            "by_process": cores, "processes": {n: len(p) for n, p in trees.items()}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0, help="one measured window")
    parser.add_argument("--repeats", type=int, default=3, help="windows, one after another")
    parser.add_argument("--settle", type=float, default=15.0,
                        help="seconds after start-up before the first window")
    parser.add_argument("--result", default="idle")
    opts = parser.parse_args(argv)
    if opts.seconds <= 0 or opts.repeats < 1 or opts.settle < 0:
        parser.error("--seconds must be > 0, --repeats >= 1, --settle >= 0")
    log_dir = Path(f"/tmp/bench-idle-{ENVIRONMENT.run}")
    ENVIRONMENT.setup()
    children: dict[str, Any] = {}
    try:
        children = start(log_dir)
        time.sleep(opts.settle)
        repeats = []
        for n in range(opts.repeats):
            repeats.append(window(children, opts.seconds))
            print(f"window {n + 1}/{opts.repeats}: {repeats[-1]['recur_percent_of_a_core']} % "
                  f"of a core", file=sys.stderr)
    finally:
        for child in children.values():
            child.stop()
        ENVIRONMENT.teardown()
    write_result(opts.result, {
        "command": " ".join(["python -m bench.bench_idle", *sys.argv[1:]]),
        "deployment": sorted(children), "logs": str(log_dir)}, repeats)


if __name__ == "__main__":
    main()
