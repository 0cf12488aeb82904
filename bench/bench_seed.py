"""Seed benchmark: generated rows into PostgreSQL with ``recur seed``, against
publishing the same rows with one ``apply_async`` each, in the same run.

1. seed: ``recur seed --generate N`` (local[*], COPY, idempotent on the job key, the default
   ``--max-connections``) into a fresh migrated schema. Figures: rows/s and
   seconds of the job (the report line) and of the whole command (JVM start
   included), peak RSS of the driver JVM and of the whole process tree
   (Python driver, JVM, Python workers), CPU seconds of the JVM, the Python
   processes and PostgreSQL (sampled from /proc), table + index size afterwards. Then
   the same seed again: every row already present, nothing duplicated.
2. baseline: the first ``--baseline-rows`` of those rows read back and
   published one ``apply_async`` each (the app's per-message publisher
   confirms, one connection), extrapolated to N.

Runs in its own RabbitMQ vhost and PostgreSQL schema, removed afterwards.

    python -m bench.bench_seed [--rows 10000000] [--baseline-rows 100000]
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.private_env import PrivateEnv, pg
from bench.results_io import write_result
from scheduler.wire import decode_call

ENVIRONMENT = PrivateEnv("seed").activate()
SCHEMA = ENVIRONMENT.schema
PG_URL = ENVIRONMENT.pg_url
REPORT = re.compile(r"seed: read (\d+), loaded (\d+), rejected (\d+), already present (\d+) "
                    r"\(store\) in ([\d.]+)s")
PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Proc:
    name: str
    parent: int
    rss: int
    cpu_seconds: float
    started: int


def processes() -> dict[int, Proc]:
    """Every process's name, parent, RSS, CPU seconds used and start tick, from /proc."""
    table: dict[int, Proc] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        fields = text[text.rindex(")") + 2:].split()
        table[int(entry.name)] = Proc(name, int(fields[1]), int(fields[21]) * PAGE,
                                      (int(fields[11]) + int(fields[12])) / TICKS,
                                      int(fields[19]))
    return table


def tree(table: dict[int, Proc], root: int) -> set[int]:
    members, changed = {root}, True
    while changed:
        new = {pid for pid, proc in table.items() if proc.parent in members} - members
        members |= new
        changed = bool(new)
    return members & table.keys()


def tree_rss(table: dict[int, Proc], root: int) -> tuple[int, int]:
    """(RSS of the whole process tree under ``root``, RSS of its biggest java process)."""
    members = tree(table, root)
    java = max((table[p].rss for p in members if table[p].name == "java"), default=0)
    return sum(table[p].rss for p in members), java


class CpuMeter:
    """CPU seconds used while the seed runs, by side: the JVM, the Python processes
    (driver and Spark's workers) and PostgreSQL (every postgres process: backends,
    WAL writer, checkpointer). Sampled, so a process that lives less than one
    sample is missed (Spark's Python workers live for the whole job)."""

    def __init__(self) -> None:
        self.first = {(pid, p.started): p.cpu_seconds for pid, p in processes().items()}
        self.last: dict[tuple[int, int], tuple[str, float]] = {}

    def sample(self, table: dict[int, Proc], root: int) -> None:
        members = tree(table, root)
        for pid, proc in table.items():
            side = ("postgresql" if proc.name.startswith("postgres") else
                    "jvm" if pid in members and proc.name == "java" else
                    "python" if pid in members else None)
            if side is not None:
                self.last[(pid, proc.started)] = (side, proc.cpu_seconds)

    def seconds(self) -> dict[str, float]:
        used: dict[str, float] = {}
        for key, (side, cpu) in self.last.items():
            used[side] = used.get(side, 0.0) + cpu - self.first.get(key, 0.0)
        return {side: round(cpu, 1) for side, cpu in sorted(used.items())}


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
    args = parser.parse_args()
    ENVIRONMENT.setup()
    try:
        with tempfile.TemporaryDirectory(prefix="recur-bench-seed-") as tmp:
            seed = run_seed(args.rows, Path(tmp) / "rejects")
            size = database_size()
            again = run_seed(args.rows, Path(tmp) / "rejects")
            base = baseline(min(args.baseline_rows, args.rows), args.rows)
    finally:
        ENVIRONMENT.teardown()
    write_result("seed", {
        "command": f"python -m bench.bench_seed --rows {args.rows} "
                   f"--baseline-rows {args.baseline_rows}",
        "seed": seed, "database_after": size,
        "seed_again": {k: again[k] for k in ("read", "loaded", "already_present",
                                            "job_seconds", "job_rows_per_second",
                                            "cpu_us_per_row")},
        "baseline_apply_async": base,
        "speedup_vs_apply_async": round(seed["job_rows_per_second"] / base["rows_per_second"], 1),
        "goal": ">= 100,000 rows/s (10M rows in under 2 minutes of load time)",
        "note": "2 shared cores: other engineers' tests load the CPU while this runs "
                "(see machine.load_avg_1m)",
    })


if __name__ == "__main__":
    main()
