"""@rate_limit benchmark, beside Celery's own per-worker ``rate_limit`` in the same run.

``--keys`` keys each limited to 5/s (burst 1), ``--jobs`` jobs each, published
interleaved (job i of every key, then job i+1), on 2 worker processes (one
worker, -c 2) with a scheduler for the deferred jobs. Modes:
``recur`` (the @rate_limit task), ``recur_hot`` (the same plus one hot key sent
100x its share: ``100 * --jobs`` jobs), ``celery`` (Celery's rate_limit set to
the same aggregate per worker process: it cannot limit per key).
Reports violations (keys and 1-s windows over rate + burst), aggregate starts/s
against the allowed rate, deferrals (busy returns) per job, and the other keys'
throughput with the hot key against without.

    python -m bench.bench_rate_limit [--keys 1000] [--jobs 20] [--result rate_limit]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from bench.private_env import PrivateEnv, pg

ENVIRONMENT = PrivateEnv("rate").activate(RECUR_WORK_SCALE="0")
RATE, BURST = 5.0, 1


def run_mode(mode: str, keys: int, jobs: int, timeout: float) -> dict[str, Any]:
    from pathlib import Path
    from tempfile import mkdtemp

    from bench.scheduler_env import purge
    from routing.redis_client import get_redis
    from tasks.app import app
    from tasks.cli.worker import celery_executable
    from tasks.flow import counters
    from tests.support.processes import recur_argv, spawn, wait_for_worker
    from tests.support.rate_tasks import INCLUDE, read_starts, runs_key, window_violations

    client, prefix = get_redis(), ENVIRONMENT.environment()["RECUR_KEY_PREFIX"]
    client.delete(runs_key(), f"{prefix}:rate:stats")
    for key in client.scan_iter(match=f"{prefix}:rate:*"):
        client.delete(key)
    purge()
    pg(f"DELETE FROM {ENVIRONMENT.schema}.due_jobs")  # the last mode's deferred rows
    env = {**os.environ, **ENVIRONMENT.environment(RECUR_WORK_SCALE="0"),
           "RECUR_SCHEDULER_INTERVAL": "0.1", "RECUR_LOG_LEVEL": "WARNING",
           "RECURTEST_CELERY_RATE": f"{keys * RATE / 2:g}/s"}
    logs = Path(mkdtemp(prefix="bench-rate-"))
    node = f"rate-{mode}@bench"
    worker = spawn("worker", [celery_executable(), "-A", "tasks", "worker", "-Q", "short",
                              "-n", node, "-c", "2", "-l", "WARNING", "--without-mingle",
                              "--without-gossip", "--include", INCLUDE], logs, env)
    wait_for_worker(app, worker, node)
    sched = spawn("scheduler", recur_argv("scheduler"), logs, env)
    task = app.tasks["tests.celery_rated_work" if mode == "celery" else "tests.rated_work"]
    hot = 100 * jobs if mode == "recur_hot" else 0
    sent = [{"id": f"k{k}-{i}", "user_id": f"k{k}", "bucket": "short", "payload": {"ms": 0}}
            for i in range(jobs) for k in range(keys)]
    sent += [{"id": f"hot-{i}", "user_id": "hot", "bucket": "short", "payload": {"ms": 0}}
             for i in range(hot)]
    began = time.time()
    try:
        for msg in sent:
            task.apply_async((msg,))
        deadline = time.monotonic() + timeout
        others_sent = len(sent) - hot  # the hot key's backlog takes 100x as long: not awaited
        while (sum(1 for s in read_starts(client) if s["key"] != "hot") < others_sent
               and time.monotonic() < deadline):
            time.sleep(0.5)
    finally:
        worker.stop()
        sched.stop()
    starts = read_starts(client)
    others = [s["t"] for s in starts if s["key"] != "hot"]
    span = max(others) - began if others else float("nan")
    over = window_violations([s for s in starts if s["key"] != "hot"] if mode == "celery"
                             else starts)
    deferred = sum(c["deferred"] for c in counters(client, prefix).values())
    return {"mode": mode, "jobs": len(sent), "started": len(starts),
            "distinct_started": len({s["id"] for s in starts}),
            "keys_over_limit": len(over), "worst_excess_per_window": max(over.values(), default=0),
            "others_per_s": round(len(others) / span, 1),
            "allowed_per_s": keys * RATE, "busy_returns_per_job": round(deferred / len(sent), 4),
            "load_1m": os.getloadavg()[0]}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--result", default="rate_limit")
    opts = parser.parse_args(argv)
    ENVIRONMENT.setup()
    try:
        from bench.results_io import write_result

        rows = [run_mode(mode, opts.keys, opts.jobs, opts.timeout)
                for mode in ("recur", "recur_hot", "celery")]
        by = {r["mode"]: r for r in rows}
        write_result(opts.result, {
            "command": " ".join(["python -m bench.bench_rate_limit", *argv]),
            "load_before": os.getloadavg(), "modes": rows,
            "others_with_hot_vs_without": round(by["recur_hot"]["others_per_s"]
                                               / by["recur"]["others_per_s"], 3)})
    finally:
        from scheduler.store import close_stores

        close_stores()
        ENVIRONMENT.teardown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
