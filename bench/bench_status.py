"""``recur status`` on a large PostgreSQL store: the bounded readings against the scan.

Grows a private schema to each of ``--rows`` waiting jobs (default 1M then 10M):
three buckets (70 % short, 20 % medium, 10 % long), every 1M rows due over
10,000 s (100 rows/s, as in ``bench_store_scale``) with the first 5 minutes of
them already due, the recurring messages of 100,000 users in the stored form
(``scheduler_env.seed_sql``); the secondary indexes are dropped during the load
and built again after it (``bench_store_scale.secondary_indexes``), then 2,000
rows are put in flight (leases ending in 25 minutes, 100 of them run out), as
the watermarks keep them, and the table is analyzed (``VACUUM ANALYZE``;
``--no-vacuum``: ``ANALYZE`` only, no visibility map, so every index probe reads
the heap too).

At each size, in the same run and interleaved (so both see the same load):

* the real command, ``recur status --json`` (bounded: index probes capped at
  10,000 rows a bucket, PostgreSQL's estimates beyond) and ``recur status
  --exact --json`` (the scan the command made before): wall time of the
  process and ``store_seconds`` (the store's readings, from its own JSON),
  median of ``--repeats``;
* the same readings in this process, each part on its own (bucket counts and
  the due-time histogram, bounded and exact on a ``DueStore``, bounded on the
  command's psycopg ``StatusReader``), median of ``--repeats``;
* what the bounded reading showed against the exact counts, per bucket;
* the import floor, interleaved with the command: the wall time of ``python -c
  "import psycopg, redis, amqp"`` (the drivers any reading of the three services
  imports) and of ``python -c pass`` (the interpreter alone), so the command's wall
  time reads against what it cannot go under (``recur status`` imports no Celery
  app, and on PostgreSQL no SQLAlchemy: scheduler/status/, status_reader.py);
* the load average before and after.

Writes ``bench/results/status.json`` (after every size). Runs in its own schema
and vhost, removed afterwards.

    flock /tmp/recur-bench.lock .venv/bin/python -m bench.bench_status \\
        --rows 1000000,10000000
    .venv/bin/python -m bench.bench_status --rows 200000 --repeats 3   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from bench import scheduler_env as benv  # first: points the settings at the bench resources
from bench.bench_store_scale import secondary_indexes
from bench.results_io import write_result

CHUNK = 1_000_000
#: Seconds one 1M chunk's due times spread over.
PERIOD_SECONDS = 10_000
SHARES = (("short", 0.7), ("medium", 0.2), ("long", 0.1))
IN_FLIGHT, EXPIRED = 2_000, 100


def seed(start: int, size: int) -> float:
    """Add jobs ``start+1..size`` (secondary indexes dropped and built again after);
    seconds taken."""
    t0 = time.monotonic()
    rebuild = secondary_indexes()
    for name, _ in rebuild:
        benv.pg(f"DROP INDEX {name}")
    first = start
    for chunk in range(start, size, CHUNK):
        count = min(CHUNK, size - chunk)
        for n, (bucket, share) in enumerate(SHARES):
            rows = round(count * share) if n < len(SHARES) - 1 else chunk + count - first
            step_us = PERIOD_SECONDS / rows * 1e6
            due = (f"now() - interval '5 minutes' + ((i - {first}) * "
                   f"interval '{step_us:.0f} microseconds')")
            benv.pg(benv.seed_sql(rows, bucket, due, start=first))
            first += rows
    for _, ddl in rebuild:
        benv.pg(ddl)
    return time.monotonic() - t0


def put_in_flight() -> None:
    """As many rows dispatched as the watermarks keep in flight, a few leases run out."""
    s = benv.SCHEMA
    benv.pg(f"UPDATE {s}.due_jobs SET state = 0 WHERE state = 1")
    benv.pg(f"UPDATE {s}.due_jobs SET state = 1, token = 1, due_at = now() + "
            f"CASE WHEN random() < {EXPIRED / IN_FLIGHT} THEN interval '-1 minute' "
            f"ELSE interval '25 minutes' END WHERE job_key IN (SELECT job_key FROM "
            f"{s}.due_jobs WHERE state = 0 ORDER BY due_at LIMIT {IN_FLIGHT})")


def command(exact: bool) -> tuple[float, dict[str, Any]]:
    """Run ``recur status --json`` (``--exact``): wall seconds and its JSON."""
    argv = [sys.executable, "-m", "config.entry", "status", "--json",
            *(["--exact"] if exact else [])]
    t0 = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=benv.ROOT)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"recur status failed ({done.returncode}): {done.stderr[-2000:]}")
    return wall, json.loads(done.stdout)


#: The drivers any reading of the store, the broker and Redis imports: the command's floor
#: (on PostgreSQL the bounded readings run on psycopg alone: no SQLAlchemy).
FLOOR = "import psycopg, redis, amqp"


def python_wall(code: str) -> float:
    """Wall seconds of ``python -c code`` (a fresh interpreter, as the command is)."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, cwd=benv.ROOT)
    return time.perf_counter() - t0


def timed(fn: Callable[[], Any], repeats: int) -> dict[str, float]:
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return {"median_ms": round(statistics.median(runs) * 1000, 1),
            "max_ms": round(max(runs) * 1000, 1)}


def in_process(repeats: int) -> dict[str, Any]:
    """The store's part of the command, each reading on its own."""
    from config.buckets_in_use import bucket_table
    from scheduler.store import DueStore
    from scheduler.store.due_histogram import MINUTES_AHEAD, due_histogram
    from scheduler.store.estimates import bounded_histogram, bounded_stats
    from scheduler.store.status_reader import StatusReader

    names = bucket_table().names
    store, reader = DueStore.open(benv.PG_URL), StatusReader.open(benv.PG_URL)
    try:
        def now() -> datetime:
            return datetime.now(UTC)
        return {
            "bounded_counts": timed(lambda: bounded_stats(store, names, now()), repeats),
            "bounded_histogram": timed(
                lambda: bounded_histogram(store, names, now(), MINUTES_AHEAD), repeats),
            "reader_counts": timed(lambda: reader.stats(names, now()), repeats),
            "reader_histogram": timed(
                lambda: reader.histogram(names, now(), MINUTES_AHEAD), repeats),
            "exact_counts": timed(lambda: store.stats(now()), repeats),
            "exact_histogram": timed(
                lambda: due_histogram(store, names, now(), MINUTES_AHEAD), repeats)}
    finally:
        store.close()
        reader.close()


def compare(bounded: dict[str, Any], exact: dict[str, Any]) -> dict[str, Any]:
    """Per bucket, what the bounded reading showed next to the exact count."""
    rows = {r["bucket"]: r for r in exact["buckets"]}
    shown: dict[str, Any] = {}
    for r in bounded["buckets"]:
        e = rows.get(r["bucket"], {})
        shown[r["bucket"]] = {
            field: {"shown": r[field], "exact": e.get(field),
                    "kind": ("estimate" if field in r["estimated"] else
                             "at least" if field in r["at_least"] else "exact")}
            for field in ("scheduled", "due_now", "dispatched", "expired_leases",
                          "set_aside")}
        shown[r["bucket"]]["lag_seconds"] = {"shown": r["lag_seconds"],
                                             "exact": e.get("lag_seconds")}
    return {"buckets": shown, "histogram": {"shown": bounded["due_histogram"],
                                            "estimated": bounded["due_histogram_estimated"],
                                            "exact": exact["due_histogram"]}}


def measure(size: int, repeats: int) -> dict[str, Any]:
    """Time the command both ways (interleaved), then the readings in this process."""
    load_before = os.getloadavg()
    for exact in (False, True):  # warm the page cache and the interpreter's files
        command(exact)
    walls: dict[bool, list[float]] = {False: [], True: []}
    store: dict[bool, list[float]] = {False: [], True: []}
    last: dict[bool, dict[str, Any]] = {}
    floor: dict[str, list[float]] = {FLOOR: [], "pass": []}
    for _ in range(repeats):
        for exact in (False, True):
            wall, doc = command(exact)
            walls[exact].append(wall)
            store[exact].append(doc["store_seconds"])
            last[exact] = doc
        for code, found in floor.items():
            found.append(python_wall(code))
    floor_s = statistics.median(floor[FLOOR])
    step: dict[str, Any] = {"waiting_jobs": size, "import_floor": {
        "command": f'python -c "{FLOOR}"', "wall_s_median": round(floor_s, 3),
        "interpreter_s_median": round(statistics.median(floor["pass"]), 3)}}
    for exact, name in ((False, "bounded"), (True, "exact")):
        step[f"command_{name}"] = {
            "wall_s_median": round(statistics.median(walls[exact]), 3),
            "over_import_floor_s": round(statistics.median(walls[exact]) - floor_s, 3),
            "store_ms_median": round(statistics.median(store[exact]) * 1000, 1),
            "store_ms_max": round(max(store[exact]) * 1000, 1)}
    step["store_speedup"] = round(statistics.median(store[True])
                                  / statistics.median(store[False]), 1)
    step["in_process"] = in_process(repeats)
    step["shown"] = compare(last[False], last[True])
    table = subprocess.run([sys.executable, "-m", "config.entry", "status"],
                           capture_output=True, text=True, timeout=600, cwd=benv.ROOT)
    step["table"] = table.stdout.splitlines()
    step["load_avg_before"], step["load_avg_after"] = load_before, os.getloadavg()
    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="1000000,10000000",
                        help="waiting jobs at each step, comma-separated, growing")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-vacuum", action="store_true",
                        help="ANALYZE only after the load (no visibility map)")
    parser.add_argument("--result", default="status")
    args = parser.parse_args()
    sizes = [int(s) for s in args.rows.split(",")]
    doc: dict[str, Any] = {
        "command": " ".join(["python -m bench.bench_status", *sys.argv[1:]]),
        "population": f"{SHARES}; each 1M due over {PERIOD_SECONDS} s, the first 5 min "
                      f"due; {IN_FLIGHT} in flight ({EXPIRED} leases run out)",
        "after_load": "ANALYZE" if args.no_vacuum else "VACUUM ANALYZE", "steps": []}
    benv.setup()
    loaded = 0
    try:
        for size in sizes:
            seconds = seed(loaded, size)
            loaded = size
            put_in_flight()
            benv.pg(f"{'ANALYZE' if args.no_vacuum else 'VACUUM ANALYZE'} "
                    f"{benv.SCHEMA}.due_jobs")
            step = {"seed_seconds": round(seconds, 1), **measure(size, args.repeats)}
            print(json.dumps({k: v for k, v in step.items() if k not in ("shown", "table")}),
                  flush=True)
            print("\n".join(step["table"]), flush=True)
            doc["steps"].append(step)
            write_result(args.result, doc)
    finally:
        benv.teardown()


if __name__ == "__main__":
    main()
