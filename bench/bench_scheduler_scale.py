"""Memory and storage at scale: recur's store against Celery's own countdown.

1. Baseline: plain Celery ``countdown=3600`` for ``--eta-tasks`` tasks on one
   worker with the prefetch limit off (``--prefetch-multiplier 0``): worker RSS
   and unacknowledged messages once it holds them.
2. recur: a scheduler and a short-bucket worker running (pull-forward on, so the
   worker keeps taking the earliest future jobs) while the store holds 0, 1M and
   10M waiting jobs: RSS of both after each step, and bytes on disk per waiting
   job (table + indexes, PostgreSQL) at the largest size.

Runs in its own RabbitMQ vhost and PostgreSQL schema, removed afterwards.

    python -m bench.bench_scheduler_scale [--sizes 1000000,10000000] [--eta-tasks 100000]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import scheduler_env as benv  # first: points the settings at the bench resources
from bench.results_io import write_result

SETTLE = 10.0


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and all its descendants, in MB."""
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid=,rss="], capture_output=True, text=True,
                         check=True).stdout.split()
    rows = [(int(out[i]), int(out[i + 1]), int(out[i + 2])) for i in range(0, len(out), 3)]
    family, total, grew = {pid}, 0, True
    while grew:
        grew = False
        for p, parent, _ in rows:
            if parent in family and p not in family:
                family.add(p)
                grew = True
    total = sum(r for p, _, r in rows if p in family)
    return round(total / 1024, 1)


def unacked(queue: str) -> int:
    out = subprocess.run(["rabbitmqctl", "list_queues", "-p", benv.VHOST, "name",
                          "messages_unacknowledged"], capture_output=True, text=True,
                         check=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == queue:
            return int(parts[1])
    return 0


def worker(log_dir: Path, name: str, *args: str, app: Any = None) -> Any:
    from tests.support.processes import spawn, wait_for_worker

    if app is None:
        from tasks.app import app
    node = f"{name}-{benv.RUN}@{socket.gethostname()}"
    celery = str(Path(os.sys.executable).parent / "celery")
    child = spawn(name, [celery, *args, "-n", node, "-l", "WARNING", "--without-mingle",
                         "--without-gossip"],
                  log_dir, {**os.environ, **benv.ENV}, cwd=benv.ROOT)
    wait_for_worker(app, child, node)
    return child


def celery_countdown(tasks: int, log_dir: Path) -> dict[str, Any]:
    """Plain Celery: countdown=3600 tasks held by a worker with unlimited prefetch."""
    from bench import eta_app
    from bench.bench_scheduler import message

    child = worker(log_dir, "eta", "-A", "bench.eta_app", "worker", "-Q", eta_app.QUEUE,
                   "-P", "solo", "--prefetch-multiplier", "0", app=eta_app.app)
    idle = rss_mb(child.pid)
    t0 = time.monotonic()
    for i in range(tasks):
        eta_app.noop_eta.apply_async(args=[message(i)], countdown=3600)
    deadline = time.monotonic() + 300
    while unacked(eta_app.QUEUE) < tasks and time.monotonic() < deadline:
        time.sleep(1)
    held = unacked(eta_app.QUEUE)
    loaded = rss_mb(child.pid)
    child.kill9()
    return {"tasks": tasks, "worker_rss_idle_mb": idle, "worker_rss_holding_mb": loaded,
            "unacked_in_broker": held, "seconds_to_hold_all": round(time.monotonic() - t0, 1),
            "kb_per_task": round((loaded - idle) * 1024 / max(held, 1), 2)}


def storage() -> dict[str, Any]:
    total, table, rows = benv.pg(
        f"SELECT pg_total_relation_size('{benv.SCHEMA}.due_jobs'), "
        f"pg_relation_size('{benv.SCHEMA}.due_jobs'), "
        f"(SELECT count(*) FROM {benv.SCHEMA}.due_jobs)")[0]
    indexes = benv.pg(
        f"SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) FROM pg_index "
        f"WHERE indrelid = '{benv.SCHEMA}.due_jobs'::regclass")
    return {"rows": rows, "total_bytes": total, "table_bytes": table,
            "bytes_per_job": round(int(str(total)) / max(int(str(rows)), 1), 1),
            "indexes": {str(name): size for name, size in indexes}}


def seed(start: int, size: int) -> float:
    """Add waiting jobs ``start+1..size`` (due in an hour, 1 ms apart); seconds taken."""
    t0 = time.monotonic()
    for first in range(start, size, 1_000_000):
        count = min(1_000_000, size - first)
        benv.pg(benv.seed_sql(count, "short", "now() + interval '1 hour' + "
                              "(i * interval '1 millisecond')", start=first))
    benv.pg(f"VACUUM ANALYZE {benv.SCHEMA}.due_jobs")
    return time.monotonic() - t0


def storage_only(sizes: list[int]) -> dict[str, Any]:
    """Bytes per waiting job at each size, without the worker and scheduler.

    The seed inserts keys in an order unlike their sort order (j1, j2, ... j10),
    as jobs scheduled one by one arrive, which leaves the primary key's pages
    part empty; after the last size the indexes are rebuilt and measured again,
    as a sorted bulk load (the Spark loader merges ``ORDER BY job_key``) or a
    ``REINDEX`` leaves them.
    """
    steps, loaded = [], 0
    for size in sizes:
        seconds = seed(loaded, size)
        loaded = size
        steps.append({"waiting_jobs": size, "seed_seconds": round(seconds, 1),
                      "storage": storage()})
    benv.pg(f"REINDEX TABLE {benv.SCHEMA}.due_jobs")
    return {"steps": steps, "after_reindex": storage()}


def recur_store(sizes: list[int], log_dir: Path) -> dict[str, Any]:
    from tests.support.processes import recur_argv, spawn

    child = worker(log_dir, "store", "-A", "tasks", "worker", "-Q", "short")
    scheduler = spawn("scheduler", recur_argv("scheduler"), log_dir,
                      {**os.environ, **benv.ENV}, cwd=benv.ROOT)
    steps, loaded = [], 0
    try:
        time.sleep(SETTLE)
        steps.append({"waiting_jobs": 0, "worker_rss_mb": rss_mb(child.pid),
                      "scheduler_rss_mb": rss_mb(scheduler.pid)})
        for size in sizes:
            seeded = seed(loaded, size)
            loaded = size
            time.sleep(SETTLE)
            steps.append({"waiting_jobs": size, "seed_seconds": round(seeded, 1),
                          "worker_rss_mb": rss_mb(child.pid),
                          "scheduler_rss_mb": rss_mb(scheduler.pid)})
        return {"steps": steps, "storage": storage(),
                "scheduler_log_tail": scheduler.log()[-500:]}
    finally:
        scheduler.stop()
        child.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--eta-tasks", type=int, default=100_000)
    parser.add_argument("--parts", default="memory",
                        help="'memory' (Celery countdown against the store, with RSS and "
                             "storage) or 'storage' (bytes per waiting job only)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    log_dir = Path(tempfile.mkdtemp(prefix="recur-bench-scale-"))
    command = (f"python -m bench.bench_scheduler_scale --sizes {args.sizes} "
               f"--eta-tasks {args.eta_tasks} --parts {args.parts}")
    benv.setup()
    try:
        figures: dict[str, Any] = {"command": command}
        if args.parts == "storage":
            figures["recur_storage"] = storage_only(sizes)
        else:
            figures["plain_celery_countdown"] = celery_countdown(args.eta_tasks, log_dir)
            figures["recur_store"] = recur_store(sizes, log_dir)
        figures["goals"] = ("worker and scheduler RSS within 20 % of idle, scheduler < 150 MB; "
                            "<= 250 bytes per waiting job")
        figures["logs"] = str(log_dir)
    finally:
        benv.teardown()
    write_result("scheduler_scale" if args.parts != "storage" else "scheduler_storage", figures)


if __name__ == "__main__":
    main()
