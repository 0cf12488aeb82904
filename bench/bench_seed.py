"""Seed benchmark: generated rows into PostgreSQL with ``recur seed``, against
publishing the same rows with one ``apply_async`` each, in the same run.

0. ceiling, first (bench/seed_ceiling.py): the same number of rows of the seed's
   shape COPYed without Spark from 1 and 2 Python processes, indexes built after;
   PostgreSQL's CPU per row there bounds any seed on this machine.
   ``--ceiling-only`` runs just this (result ``seed_ceiling.json``).

1. seed: ``recur seed --generate N`` (local[*], COPY, idempotent on the job key, the default
   ``--max-connections``) into a fresh migrated schema. Figures: rows/s and
   seconds of the job (the report line) and of the whole command (JVM start
   included), peak RSS of the driver JVM and of the whole process tree
   (Python driver, JVM, Python workers), CPU seconds of the JVM, the Python
   processes (sampled from /proc) and PostgreSQL (exact, bench/seed_cpu.py), table
   + index size afterwards. Then
   the same seed again: every row already present, nothing duplicated.
2. baseline: the first ``--baseline-rows`` of those rows read back and
   published one ``apply_async`` each (the app's per-message publisher
   confirms, one connection), extrapolated to N.

Runs in its own RabbitMQ vhost and PostgreSQL schema, removed afterwards.

    python -m bench.bench_seed [--rows 10000000] [--baseline-rows 100000] [--ceiling-only]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.private_env import PrivateEnv, pg
from bench.results_io import write_result
from bench.seed_ceiling import ceiling
from bench.seed_cpu import CpuMeter, processes, tree_rss
from scheduler.wire import decode_call

ENVIRONMENT = PrivateEnv("seed").activate()
SCHEMA = ENVIRONMENT.schema
PG_URL = ENVIRONMENT.pg_url
REPORT = re.compile(r"seed: read (\d+), loaded (\d+), rejected (\d+), already present (\d+) "
                    r"\(store\) in ([\d.]+)s")


def run_seed(rows: int, rejects: Path) -> dict[str, Any]:
    """``recur seed --generate rows`` as a child; its report, wall time and peak memory."""
    argv = [sys.executable, "-m", "tasks.cli", "seed", "--generate", str(rows), "--seed", "1",
            "--spread", "1h", "--database-url", PG_URL, "--rejects", str(rejects)]
    peak = {"tree": 0, "java": 0}
    cpu = CpuMeter()
    started = time.monotonic()
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def watch() -> None:
        while child.poll() is None:
            table = processes()
            everything, java = tree_rss(table, child.pid)
            peak["tree"], peak["java"] = max(peak["tree"], everything), max(peak["java"], java)
            cpu.sample(table, child.pid)
            time.sleep(0.5)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    out, _ = child.communicate()
    watcher.join()
    cpu.sample(processes(), child.pid)  # PostgreSQL's CPU up to the end
    wall = time.monotonic() - started
    match = REPORT.search(out)
    if child.returncode != 0 or match is None:
        raise SystemExit(f"recur seed failed ({child.returncode}):\n{out[-3000:]}")
    read, loaded, rejected, present = (int(match[i]) for i in range(1, 5))
    used = cpu.seconds()
    job = float(match[5])
    return {"command": " ".join(argv[2:]), "read": read, "loaded": loaded,
            "rejected": rejected, "already_present": present, "job_seconds": job,
            "job_rows_per_second": round(read / job), "wall_seconds_with_jvm_start":
            round(wall, 1), "peak_rss_driver_jvm_mb": round(peak["java"] / 2**20),
            "peak_rss_process_tree_mb": round(peak["tree"] / 2**20),
            "cpu_seconds": used,
            "cpu_us_per_row": {side: round(seconds * 1e6 / rows, 1)
                               for side, seconds in used.items()},
            "progress_lines": [line for line in out.splitlines()
                               if line.startswith("seed: ") and "partitions" in line][-3:]}


def database_size() -> dict[str, Any]:
    (rows, table, total), = pg(
        f"SELECT count(*), pg_relation_size('{SCHEMA}.due_jobs'), "
        f"pg_total_relation_size('{SCHEMA}.due_jobs') FROM {SCHEMA}.due_jobs")
    indexes = pg(f"SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) FROM pg_index "
                 f"WHERE indrelid = '{SCHEMA}.due_jobs'::regclass")
    per_row = max(int(rows), 1)
    # Bytes per waiting job (#26: <= 250 with UUID users and every index).
    return {"rows_in_table": rows, "table_mb": round(table / 2**20),
            "table_with_indexes_mb": round(total / 2**20),
            "bytes_per_job": round(total / per_row, 1),
            "bytes_per_job_by_relation": {
                "heap": round(table / per_row, 1),
                **{str(n).rsplit(".", 1)[-1]: round(int(b) / per_row, 1) for n, b in indexes}}}


def baseline(count: int, full: int) -> dict[str, Any]:
    """The first ``count`` seeded rows published with one apply_async each."""
    from tasks.process import process_message

    messages = [decode_call(args, key, bucket)[0][0] for (key, bucket, args) in pg(
        f"SELECT job_key, bucket, args FROM {SCHEMA}.due_jobs ORDER BY job_key LIMIT {count}")]
    started = time.monotonic()
    for message in messages:
        process_message.apply_async((message,))
    seconds = time.monotonic() - started
    rate = len(messages) / seconds
    return {"rows": len(messages), "seconds": round(seconds, 1),
            "rows_per_second": round(rate), f"extrapolated_seconds_for_{full}": round(full / rate),
            "how": "tasks.process_message.apply_async per row, the app's publisher confirms "
                   "(confirm_publish) on one pooled connection"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--baseline-rows", type=int, default=100_000)
    parser.add_argument("--ceiling-only", action="store_true",
                        help="Only the ceiling: the same rows COPYed without Spark.")
    args = parser.parse_args()
    if args.rows < 1 or args.baseline_rows < 1:
        parser.exit(2, "recur: --rows and --baseline-rows must be at least 1\n")
    cores = os.cpu_count() or 1
    command = (f"python -m bench.bench_seed --rows {args.rows} "
               + ("--ceiling-only" if args.ceiling_only
                  else f"--baseline-rows {args.baseline_rows}"))
    ENVIRONMENT.setup()
    try:
        with tempfile.TemporaryDirectory(prefix="recur-bench-seed-") as tmp:
            top = ceiling(args.rows, SCHEMA, Path(tmp), cores)
            if args.ceiling_only:
                write_result("seed_ceiling", {"command": command, "ceiling": top})
                return
            seed = run_seed(args.rows, Path(tmp) / "rejects")
            size = database_size()
            again = run_seed(args.rows, Path(tmp) / "rejects")
            base = baseline(min(args.baseline_rows, args.rows), args.rows)
    finally:
        ENVIRONMENT.teardown()
    seed_pg = seed["cpu_us_per_row"].get("postgresql", 0.0)
    write_result("seed", {
        "command": command, "seed": seed, "database_after": size,
        "seed_again": {k: again[k] for k in ("read", "loaded", "already_present",
                                            "job_seconds", "job_rows_per_second",
                                            "cpu_us_per_row")},
        "baseline_apply_async": base,
        "speedup_vs_apply_async": round(seed["job_rows_per_second"] / base["rows_per_second"], 1),
        "ceiling": top,
        "seed_vs_ceiling": {
            "rows_per_second": round(seed["job_rows_per_second"] / max(
                run["rows_per_second"] for run in top["runs"]), 2),
            "postgresql_cpu_us_per_row": {"seed": seed_pg,
                                          "ceiling": top["least_postgresql_cpu_us_per_row"]}},
        "goal": ">= 150,000 rows/s with every index (#26)",
        "note": "2 shared cores: other engineers' tests load the CPU while this runs "
                "(see machine.load_avg_1m)",
    })


if __name__ == "__main__":
    main()
