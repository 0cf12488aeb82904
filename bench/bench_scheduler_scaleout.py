"""Schedulers that add up: 1, 2 and 4 ``recur scheduler`` processes on one store.

Each step seeds ``--rows`` jobs (short bucket) in one PostgreSQL store, all
falling due at the same moment a few seconds ahead, starts N real ``recur
scheduler`` processes (watermarks out of the way, pull-forward off, every
other setting at its default), and times from the due moment until no
scheduled row is left: rows/s for N schedulers, per scheduler, and the ratio
to one scheduler measured in the same run (goal: >= 1.6x with 2). The bucket
queue is purged every second (nobody consumes it; only the drain is measured).

While the rows drain it samples CPU from /proc: the schedulers (with their
threads), every PostgreSQL process, RabbitMQ's ``beam.smp`` and the whole
machine, in cores (CPU-seconds per second; this machine has ``os.cpu_count()``
cores), so when the ratio falls short it shows which side ran out. PostgreSQL
and RabbitMQ are shared with whatever else runs on the machine: their figures
include it, and so does the load average recorded.

Each round runs every count, in order, then the next round in the reverse order
(1,2,4,4,2,1 …), so a machine whose other load drifts during the run weighs on
every count alike; the ratios come from each count's median.

    python -m bench.bench_scheduler_scaleout [--rows 200000] [--schedulers 1,2,4] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import scheduler_env as benv  # first: points the settings at the bench resources
from bench.results_io import write_result

#: Seconds between the seed and the rows' due moment: the schedulers start meanwhile.
LEAD_SECONDS = 15.0
TICKS = os.sysconf("SC_CLK_TCK")


def stat_fields(pid: int) -> list[str]:
    """/proc/<pid>/stat after the command name (field 3 first); [] if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return []


def proc_ticks(pid: int) -> int:
    """utime + stime of one process (all its threads), in clock ticks; 0 if gone."""
    fields = stat_fields(pid)
    return int(fields[11]) + int(fields[12]) if fields else 0


def family_ticks(pids: list[int]) -> int:
    """CPU of a server whose workers come and go (PostgreSQL's backends): the live
    processes' own ticks plus what the root process reaped from exited children
    (cutime + cstime), so a backend that exits between two samples still counts."""
    parents = {pid: int(fields[1]) for pid in pids if (fields := stat_fields(pid))}
    roots = [pid for pid, parent in parents.items() if parent not in parents]
    reaped = 0
    for root in roots:
        fields = stat_fields(root)
        reaped += int(fields[13]) + int(fields[14]) if fields else 0
    return sum(proc_ticks(p) for p in parents) + reaped


def pids_named(*names: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                comm = (entry / "comm").read_text().strip()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if comm in names:
                found.append(int(entry.name))
    return found


def machine_busy_ticks() -> int:
    """Busy clock ticks of all cores (everything but idle and iowait)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(values) - values[3] - values[4]


class CpuSample:
    """CPU used by each group between ``start()`` and ``stop()``, in cores."""

    def __init__(self, scheduler_pids: list[int]) -> None:
        self.groups = {"schedulers": lambda: scheduler_pids,
                       "postgresql": lambda: pids_named("postgres"),
                       "rabbitmq": lambda: pids_named("beam.smp")}

    def read(self) -> dict[str, int]:
        ticks = {name: family_ticks(pids()) for name, pids in self.groups.items()}
        return {**ticks, "machine": machine_busy_ticks()}

    def start(self) -> None:
        self.t0, self.first = time.monotonic(), self.read()

    def stop(self) -> dict[str, float]:
        last, seconds = self.read(), time.monotonic() - self.t0
        cores = {name: round((last[name] - self.first[name]) / TICKS / seconds, 2)
                 for name in last}
        return {**{f"{name}_cores": value for name, value in cores.items()},
                "machine_share_busy": round(cores["machine"] / (os.cpu_count() or 1), 2)}


def purge_loop(stop: threading.Event) -> None:
    from bench.bench_scheduler import purge

    while not stop.wait(1.0):
        purge()


class Remaining:
    """Scheduled rows left, polled on one connection (PostgreSQL's connection slots are
    shared with every scheduler of the step and with the rest of the machine)."""

    def __init__(self) -> None:
        import psycopg

        from bench.private_env import PG_DSN

        self.conn = psycopg.connect(PG_DSN, autocommit=True)

    def __call__(self) -> int:
        row = self.conn.execute(
            f"SELECT count(*) FROM {benv.SCHEMA}.due_jobs WHERE state = 0").fetchone()
        return int(row[0]) if row else 0

    def close(self) -> None:
        self.conn.close()


def step(schedulers: int, rows: int, log_dir: Path) -> dict[str, Any]:
    """Seed ``rows`` due in LEAD_SECONDS, start the schedulers, time the drain."""
    from tasks.processes import recur_argv, spawn

    benv.pg(f"TRUNCATE {benv.SCHEMA}.due_jobs")
    due = datetime.now(UTC) + timedelta(seconds=LEAD_SECONDS)
    benv.pg(benv.seed_sql(rows, "short", f"'{due.isoformat()}'::timestamptz"))
    benv.pg(f"VACUUM ANALYZE {benv.SCHEMA}.due_jobs")
    env = {**os.environ, **benv.ENV, "RECUR_LOW_WATERMARK": "1000000000",
           "RECUR_HIGH_WATERMARK": "1000000000", "RECUR_PULL_FORWARD": ""}
    children = [spawn(f"scheduler-{schedulers}-{n}", recur_argv("scheduler"), log_dir, env,
                      cwd=benv.ROOT) for n in range(schedulers)]
    stop_purging = threading.Event()
    purger = threading.Thread(target=purge_loop, args=(stop_purging,), daemon=True)
    purger.start()
    cpu = CpuSample([c.pid for c in children])
    scheduled_left = Remaining()
    try:
        time.sleep(max(0.0, (due - datetime.now(UTC)).total_seconds()))
        if any(c.proc.poll() is not None for c in children):
            raise RuntimeError("a scheduler exited before the rows fell due:\n"
                               + "\n".join(c.log()[-2000:] for c in children))
        cpu.start()
        t0 = time.monotonic()
        deadline = t0 + 600
        while scheduled_left() and time.monotonic() < deadline:
            time.sleep(0.1)
        seconds = time.monotonic() - t0
        usage = cpu.stop()
        left = scheduled_left()
    finally:
        scheduled_left.close()
        stop_purging.set()
        purger.join()
        for child in children:
            child.stop()
    drained = rows - left
    return {"schedulers": schedulers, "rows": drained, "seconds": round(seconds, 2),
            "rows_per_s": round(drained / seconds), "rows_per_s_each":
            round(drained / seconds / schedulers), "cpu": usage,
            "load_avg_1m_after": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--schedulers", default="1,2,4")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    counts = [int(n) for n in args.schedulers.split(",")]
    order = [n for r in range(args.rounds) for n in (counts if r % 2 == 0 else counts[::-1])]
    log_dir = Path(tempfile.mkdtemp(prefix="recur-bench-scaleout-"))
    benv.setup()
    try:
        steps = [step(n, args.rows, log_dir) for n in order]
    finally:
        benv.teardown()
    median = {n: statistics.median(s["rows_per_s"] for s in steps if s["schedulers"] == n)
              for n in counts}
    write_result("scheduler_scaleout", {
        "command": f"python -m bench.bench_scheduler_scaleout --rows {args.rows} "
                   f"--schedulers {args.schedulers} --rounds {args.rounds}",
        "goal": ">= 1.6x the rows/s of one scheduler with 2",
        "steps": steps,
        "median_rows_per_s": {str(n): round(v) for n, v in median.items()},
        "ratio_to_one": {str(n): round(v / median[counts[0]], 2) for n, v in median.items()},
        "logs": str(log_dir),
    })


if __name__ == "__main__":
    main()
