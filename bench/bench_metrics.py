"""The exporter's scrape at scale: recur's background-refreshed gauges against a
count(*) per scrape.

For each size (waiting jobs in the store, split over the buckets, one in ten
due now): seed with server-side INSERTs, then measure

- the scrape: rendering /metrics from the last snapshot, in process (p50/p99 of
  ``--scrapes``) and once over HTTP from a running ``recur exporter``-style
  server;
- the exporter's background reads: the bounded *heads* read (every refresh)
  and the *full count* (at most once per 4 refreshes, ≤ 10 % duty cycle);
- the baseline: what an exporter that counts on every scrape pays per scrape
  (the grouped count over every row, as ``recur status`` reads it).

Runs in its own vhost and PostgreSQL schema, removed afterwards.

    flock /tmp/recur-bench.lock .venv/bin/python -m bench.bench_metrics [--sizes 1000000,10000000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import urllib.request
from typing import Any

import bench.results_io  # noqa: F401 - waits for a quiet machine, then watches the run
from bench.private_env import PrivateEnv, pg

ENVIRONMENT = PrivateEnv("metrics").activate()
SCHEMA = ENVIRONMENT.schema


def seed(start: int, size: int) -> float:
    """Rows start+1..size, a million per bucket in turn; one in ten due an hour ago."""
    from config.buckets_in_use import BUCKETS

    t0 = time.monotonic()
    for first in range(start, size, 1_000_000):
        bucket = BUCKETS[(first // 1_000_000) % len(BUCKETS)].name
        pg(seed_sql(min(1_000_000, size - first), bucket, first))
    pg(f"VACUUM ANALYZE {SCHEMA}.due_jobs")
    return time.monotonic() - t0


def seed_sql(count: int, bucket: str, start: int) -> str:
    """Server-side INSERT of recurring jobs shaped as bench.scheduler_env.seed_sql's."""
    from scheduler.wire import encode_call

    message = {"id": "j", "user_id": "@user@", "bucket": bucket,
               "payload": {"every": 3600.0, "runs": None}}
    head, tail = encode_call([message], {}, job_key="j", bucket=bucket).split("@user@")
    args = f"'{head}' || md5((i % 100000)::text)::uuid::text || '{tail}'"
    task = "tasks.process_message"
    due = ("now() + (((i % 10) * 2 - 1) * interval '1 hour') + "
           "(i * interval '1 millisecond')")
    return (f"WITH new AS (INSERT INTO {SCHEMA}.due_tasks (name) VALUES ('{task}') "
            f"ON CONFLICT (name) DO NOTHING RETURNING code) "
            f"INSERT INTO {SCHEMA}.due_jobs (job_key, task_id, bucket, args, due_at) "
            f"SELECT 'j' || i, coalesce((SELECT code FROM new), (SELECT code FROM "
            f"{SCHEMA}.due_tasks WHERE name = '{task}')), '{bucket}', {args}, {due} "
            f"FROM generate_series({start + 1}, {start + count}) AS i")


def timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(size: int, scrapes: int, port: int, refresher: Any, registry: Any) -> dict[str, Any]:
    from prometheus_client import generate_latest

    from scheduler.calls import utcnow
    from scheduler.store import DueStore
    from tasks.metrics import system

    heads = [timed(lambda: refresher._read_heads(refresher.snapshot)) for _ in range(3)]
    totals = timed(lambda: refresher._read_totals(refresher.snapshot))
    refresher.refresh()
    scrape = sorted(timed(lambda: generate_latest(registry)) for _ in range(scrapes))
    url = f"http://127.0.0.1:{port}/metrics"
    http = sorted(timed(lambda: urllib.request.urlopen(url, timeout=30).read())
                  for _ in range(20))
    store = DueStore.open(ENVIRONMENT.pg_url)
    try:
        baseline = [timed(lambda: store.stats(utcnow())) for _ in range(3)]
        exact = store.stats(utcnow())
    finally:
        store.close()
    body = generate_latest(registry).decode()
    exported = {line.split(" ")[0]: float(line.split(" ")[1]) for line in body.splitlines()
                if line.startswith(("recur_jobs_scheduled{", "recur_jobs_due{"))}
    p50, p99 = statistics.median(scrape), scrape[int(0.99 * (len(scrape) - 1))]
    base = statistics.median(baseline)
    return {
        "waiting_jobs": size,
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "scrape_in_process_ms": {"p50": round(p50 * 1000, 3), "p99": round(p99 * 1000, 3)},
        "scrape_http_ms": {"p50": round(statistics.median(http) * 1000, 2),
                           "max": round(http[-1] * 1000, 2)},
        "background_heads_read_ms": round(statistics.median(heads) * 1000, 1),
        "background_full_count_s": round(totals, 2),
        "full_count_interval_s": round(max(4 * refresher.cfg.metrics_refresh,
                                           totals / system.DUTY), 1),
        "baseline_count_per_scrape_ms": round(base * 1000, 1),
        "baseline_over_recur_scrape_p50": round(base / p50, 0),
        "exported": exported,
        "store_exact": {b: {"scheduled": s.scheduled, "due": s.due} for b, s in exact.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--scrapes", type=int, default=200)
    args = parser.parse_args()
    from bench.results_io import write_result
    from config.settings import settings
    from tasks.metrics.exporter import exporter_registry
    from tasks.metrics.serve import serve_metrics
    from tasks.metrics.system import Refresher
    from tests.support.services import free_port

    ENVIRONMENT.setup()
    try:
        port = free_port()
        cfg = settings()
        refresher = Refresher(cfg)
        registry = exporter_registry(refresher)
        serve_metrics(type(cfg)(**{**cfg.__dict__, "metrics_port": port}), registry)
        steps, loaded = [], 0
        for size in (int(s) for s in args.sizes.split(",")):
            seeded = seed(loaded, size)
            loaded = size
            step = measure(size, args.scrapes, port, refresher, registry)
            step["seed_seconds"] = round(seeded, 1)
            steps.append(step)
            print(step, flush=True)
        refresher.stop()
    finally:
        ENVIRONMENT.teardown()
    write_result("metrics", {
        "command": f"python -m bench.bench_metrics --sizes {args.sizes} --scrapes "
                   f"{args.scrapes}",
        "steps": steps,
        "goal": "a scrape reads no service: its time does not grow with the waiting rows"})


if __name__ == "__main__":
    main()
