"""Fair-share benchmark: a noisy user's backlog beside quiet users, with and without fair
share, in one run (issue #24).

``--noisy`` one-shot jobs of one user due at T and ``--quiet`` users with one job each
due at T + 1 s, all in the short bucket, seeded (SQL) before T; a real ``recur
scheduler`` (pull-forward off, so nothing runs before its time) and real workers
(``celery worker -P threads -c 8``, no-op work) run them. Modes, one after the other:
``fair`` (RECUR_FAIR_SHARE=1) and ``strict`` (=0). Per mode: the quiet users' lateness
(start - due: p50, p99, max), the total throughput (jobs / (last finish - T)), the
noisy user's rate after the last quiet job ran against the whole run's (it must keep
every idle slot), the slowest 1-s window against the median one, and the load average.
Targets: quiet p99 <= 5 s with fair share, throughput >= 0.95x without it.

    python -m bench.bench_fair_share [--noisy 100000] [--quiet 1000] [--result fair_share]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from tempfile import mkdtemp
from typing import Any

import bench.results_io  # noqa: F401 - waits for a quiet machine, then watches the run
from bench.private_env import PrivateEnv, pg

ENVIRONMENT = PrivateEnv("fair").activate(
    RECUR_WORK_SCALE="0", RECUR_PULL_FORWARD="", RECUR_COMPLETION_LOG_MAXLEN="5000000")
MODES = {"fair": "1", "strict": "0"}
#: Seconds from the end of the seeding to T (the scheduler starts meanwhile).
LEAD = 4.0


def seed(noisy: int, quiet: int, lead: float) -> float:
    """Seed the backlog (one transaction), due at T = now + seeding + ``lead``; T."""
    schema = ENVIRONMENT.schema
    started = time.time()
    due = started + lead + noisy / 50_000  # the insert's own time, generously
    task = (f"(SELECT code FROM {schema}.due_tasks WHERE name = 'tasks.process_message')")
    pg(f"INSERT INTO {schema}.due_tasks (name) VALUES ('tasks.process_message') "
       f"ON CONFLICT DO NOTHING")
    pg(f"INSERT INTO {schema}.due_jobs (job_key, task_id, bucket, args, due_at) "
       f"SELECT 'n' || i, {task}, 'short', '[\"noisy\",null]', to_timestamp({due}) "
       f"FROM generate_series(1, {noisy}) AS s(i) UNION ALL "
       f"SELECT 'q' || i, {task}, 'short', '[\"quiet-' || i || '\",null]', "
       f"to_timestamp({due + 1.0}) FROM generate_series(1, {quiet}) AS s(i)")
    pg(f"ANALYZE {schema}.due_jobs")
    if time.time() > due - 1.0:
        raise SystemExit(f"recur bench: seeding took {time.time() - started:.1f}s, past T: "
                         f"raise LEAD")
    return due


def reset(client: Any, prefix: str) -> None:
    """Nothing left of the last mode: rows, queued messages, logged runs."""
    from config.keys import completed
    from tasks.app import app

    pg(f"TRUNCATE {ENVIRONMENT.schema}.due_jobs")
    with app.connection_for_write() as conn, conn.channel() as channel:
        channel.queue_purge("short")
    client.delete(completed(prefix))


def completions(client: Any, prefix: str) -> list[tuple[str, float, float]]:
    """(job key, started, finished) of every run logged."""
    from config.keys import completed

    found, after = [], "-"
    while batch := client.xrange(completed(prefix), min=after, count=20_000):
        found += [(f["id"], float(f["started"]), float(f["finished"])) for _, f in batch]
        after = f"({batch[-1][0]}"
    return found


def run_mode(mode: str, noisy: int, quiet: int, timeout: float) -> dict[str, Any]:
    from config.keys import completed
    from routing.redis_client import get_redis
    from tasks.app import app
    from tasks.cli.worker import celery_executable
    from tests.support.processes import recur_argv, spawn, wait_for_worker

    client = get_redis()
    prefix = ENVIRONMENT.environment()["RECUR_KEY_PREFIX"]
    reset(client, prefix)
    env = {**os.environ, "RECUR_FAIR_SHARE": MODES[mode], "RECUR_LOG_LEVEL": "WARNING"}
    logs = Path(mkdtemp(prefix=f"bench-fair-{mode}-"))
    node = f"fair-{mode}@bench"
    worker = spawn("worker", [celery_executable(), "-A", "tasks", "worker", "-Q", "short",
                              "-P", "threads", "-c", "8", "-n", node, "-l", "WARNING",
                              "--without-mingle", "--without-gossip"], logs, env)
    scheduler = None
    try:
        wait_for_worker(app, worker, node)
        load_before = os.getloadavg()
        due = seed(noisy, quiet, LEAD)
        scheduler = spawn("scheduler", recur_argv("scheduler"), logs, env)
        deadline = time.monotonic() + timeout
        while client.xlen(completed(prefix)) < noisy + quiet and time.monotonic() < deadline:
            time.sleep(0.5)
        runs = completions(client, prefix)
    finally:
        if scheduler is not None:
            scheduler.stop()
        worker.stop()
    return figures(mode, runs, due, noisy, quiet) | {
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()], "logs": str(logs)}


def figures(mode: str, runs: list[tuple[str, float, float]], due: float, noisy: int,
            quiet: int) -> dict[str, Any]:
    """Lateness of the quiet users, throughput, the noisy user's share of the slots."""
    late = sorted(start - (due + 1.0) for key, start, _ in runs if key.startswith("q"))
    ran = {key for key, _, _ in runs}
    end = max((finish for _, _, finish in runs), default=due)
    last_quiet = max((start for key, start, _ in runs if key.startswith("q")), default=due)
    after = [start for key, start, _ in runs if key.startswith("n") and start > last_quiet]
    seconds = [0] * (int(end - due) + 1)
    for _, start, _ in runs:
        if start >= due:
            seconds[int(start - due)] += 1
    inner = seconds[1:-1] or seconds
    return {
        "mode": mode, "jobs": noisy + quiet, "ran": len(runs), "distinct": len(ran),
        "lost": noisy + quiet - len(ran),
        "quiet_late_p50_s": round(_quantile(late, 0.5), 2),
        "quiet_late_p99_s": round(_quantile(late, 0.99), 2),
        "quiet_late_max_s": round(late[-1], 2) if late else None,
        "seconds": round(end - due, 2),
        "throughput_per_s": round(len(runs) / max(end - due, 1e-9), 1),
        "noisy_after_quiet_per_s": round(len(after) / max(end - last_quiet, 1e-9), 1),
        "slowest_second_vs_median": round(min(inner) / max(statistics.median(inner), 1), 2),
    }


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(q * len(values)))]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--noisy", type=int, default=100_000)
    parser.add_argument("--quiet", type=int, default=1000)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--result", default="fair_share")
    opts = parser.parse_args(argv)
    ENVIRONMENT.setup()
    try:
        from bench.results_io import write_result

        rows = {mode: run_mode(mode, opts.noisy, opts.quiet, opts.timeout) for mode in MODES}
        fair, strict = rows["fair"], rows["strict"]
        write_result(opts.result, {
            "command": " ".join(["python -m bench.bench_fair_share", *argv]),
            "modes": list(rows.values()),
            "throughput_fair_vs_strict": round(fair["throughput_per_s"]
                                               / max(strict["throughput_per_s"], 1e-9), 3),
            "targets": {"quiet_late_p99_s": "<= 5 with fair share",
                        "throughput_fair_vs_strict": ">= 0.95"}})
    finally:
        from scheduler.store import close_stores

        close_stores()
        ENVIRONMENT.teardown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
