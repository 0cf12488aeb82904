"""Full-cycle benchmark: dispatch → worker → reschedule, against plain Celery consuming.

Both use one ``celery worker -P threads -c 8`` on the short queue and a task that
only counts its run in Redis; ours reschedules itself through the store each run.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import scheduler_env as benv

ROWS = 20_000
WARMUP = 5.0


def start_worker(log_dir: Path) -> Any:
    from tasks.app import app
    from tests.support.processes import spawn, wait_for_worker

    node = f"bench-{benv.RUN}@{socket.gethostname()}"
    celery = str(Path(os.sys.executable).parent / "celery")
    child = spawn("worker", [celery, "-A", "tasks", "worker", "-Q", "short", "-P", "threads",
                             "-c", "8", "-n", node, "-l", "WARNING", "--without-mingle",
                             "--without-gossip", "--include", "bench.scheduler_tasks"],
                  log_dir, {**os.environ, **benv.ENV}, cwd=benv.ROOT)
    wait_for_worker(app, child, node)
    return child


def counted_rate(seconds: float) -> dict[str, float]:
    """Runs per second counted over ``seconds`` after a warm-up."""
    from bench.scheduler_tasks import runs_key
    from routing.redis_client import get_redis

    time.sleep(WARMUP)
    before, t0 = int(get_redis().get(runs_key()) or 0), time.monotonic()
    time.sleep(seconds)
    after, dt = int(get_redis().get(runs_key()) or 0), time.monotonic() - t0
    return {"runs": after - before, "seconds": round(dt, 2),
            "per_second": round((after - before) / dt)}


def messages(task: str, count: int) -> list[Any]:
    from scheduler.store import Claimed

    now = datetime.now(UTC)
    return [Claimed(f"j{i}", task, "short", json.dumps({"args": [{
        "id": f"j{i}", "user_id": f"u{i % 1000}", "bucket": "short", "payload": None}],
        "kwargs": {}}), now, 1, now) for i in range(count)]


def ours(seconds: float, log_dir: Path) -> dict[str, float]:
    from tests.support.processes import recur_argv, spawn

    benv.pg(f"TRUNCATE {benv.SCHEMA}.due_jobs")
    from scheduler.store import DueStore, Job

    store = DueStore.open(benv.PG_URL)
    now = datetime.now(UTC)
    jobs = [Job(m.job_key, m.task, m.bucket, m.args, now - timedelta(seconds=1))
            for m in messages("bench.noop_recurring", ROWS)]
    store.schedule(jobs, now)
    store.close()
    worker = start_worker(log_dir)
    scheduler = spawn("scheduler", recur_argv("scheduler"), log_dir,
                      {**os.environ, **benv.ENV}, cwd=benv.ROOT)
    try:
        return counted_rate(seconds)
    finally:
        scheduler.stop()
        worker.stop()


def plain(seconds: float, log_dir: Path) -> dict[str, float]:
    from routing.queues import TASK_EXCHANGE
    from scheduler.publisher import ConfirmingPublisher

    publisher = ConfirmingPublisher(benv.BROKER_URL, TASK_EXCHANGE.name)
    publisher.connect()
    batch = messages("bench.noop_plain", 1000)
    for _ in range(int((seconds + WARMUP) * 4)):  # enough for 4,000 runs/s
        publisher.publish(batch)
    publisher.close()
    worker = start_worker(log_dir)
    try:
        return counted_rate(seconds)
    finally:
        worker.stop()


def cycle(seconds: float) -> dict[str, Any]:
    purge = benv.purge

    log_dir = Path(tempfile.mkdtemp(prefix="recur-bench-cycle-"))
    mine = ours(seconds, log_dir)
    purge()
    theirs = plain(seconds, log_dir)
    purge()
    return {"recur_full_cycle": mine, "plain_celery_consume": theirs,
            "ratio": round(mine["per_second"] / max(theirs["per_second"], 1), 2),
            "worker": "celery worker -P threads -c 8 -Q short", "logs": str(log_dir),
            "goal": "ours >= 70 % of plain Celery's consume rate"}
