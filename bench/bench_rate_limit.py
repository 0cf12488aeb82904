"""@rate_limit benchmark, beside Celery's own per-worker ``rate_limit`` in the same run.

``--keys`` keys each limited to 5/s (burst 1), ``--jobs`` jobs each, all published
first (job i of every key, then job i + 1), then run by 2 worker processes with a
scheduler for the jobs that wait in the store. Modes, one after the other:

* ``capacity``: the same no-op job with no limit: what these workers can run. The
  aggregate target is ≥ 0.9 x min(allowed rate, capacity).
* ``recur``: the @rate_limit task.
* ``recur_hot``: the same plus one key, "hot", sent 100x its share (100 x ``--jobs``
  jobs spread among the others): the other keys' rate against ``recur``'s.
* ``celery``: Celery's own ``rate_limit="5/s"``, what a Celery user writes for "5 a
  second per account". It is one token bucket per task name in each worker instance
  (node), not per key: on 2 workers (2 nodes, -c 1 each) every key together gets
  10/s. Run for ``--celery-seconds`` (20,000 jobs at 10/s would take half an hour).
* ``floor``: the unlimited job plus one Redis script call that decides nothing: what
  any limit that asks Redis once a job costs at least (not in the default modes).
* ``celery_sized``: Celery's ``rate_limit`` sized for the aggregate (allowed / 2 per
  node), with the hot key: the throughput, and the hot key's per-key violations.

Celery's modes run in recur's worker, which fires every due timer per turn of its
event loop (tasks/due_timers.py): stock kombu fires ten and then sleeps up to a second,
so stock Celery's rate_limit="100/s" runs about 5 tasks a second (celery/celery#5927);
these modes measure Celery's rate_limit semantics, not that stall.

Reports per mode: keys over rate + burst in some 1-second window (violations), the
other keys' starts/s, deferrals (busy returns) per job, order inversions (pairs of one
key's jobs started in the opposite order of publication, summed over keys), and the CPU
seconds each component used (workers, scheduler, Redis, PostgreSQL, RabbitMQ, this publisher).

    python -m bench.bench_rate_limit [--keys 1000] [--jobs 20] [--result rate_limit]
    python -m bench.bench_rate_limit --modes capacity,recur,recur_hot,capacity,recur,\
        recur_hot,capacity,recur,recur_hot,celery,celery_sized   # repeats, interleaved

A mode named more than once counts in the summary with the median of its runs (this
machine's speed moves by more than the effects measured within minutes: one run of
each is not a figure).
    python -m bench.bench_rate_limit --keys 50 --jobs 10 --celery-seconds 10 --allow-busy

The full size takes about 4 minutes (20,000 jobs published per mode, the Celery
modes watched for ``--celery-seconds`` each).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

import bench.results_io  # noqa: F401 - waits for a quiet machine, then watches the run
from bench.private_env import PrivateEnv, pg
from bench.rate_limit_rig import (
    RATE,
    CpuMeter,
    figures,
    log_dir,
    messages,
    wait_until,
)
from bench.results_io import write_result  # watches the machine for the whole run

ENVIRONMENT = PrivateEnv("rate").activate(RECUR_WORK_SCALE="0")
#: The workers' log level (INFO logs every deferral: for a look at a small run).
LOG_LEVEL = os.environ.get("RECURBENCH_WORKER_LOG", "WARNING")
MODES = ("capacity", "recur", "recur_hot", "celery", "celery_sized", "floor")
TASKS = {"capacity": "tests.unrated_work", "recur": "tests.rated_work",
         "recur_hot": "tests.rated_work", "celery": "tests.celery_rated_work",
         "celery_sized": "tests.celery_rated_work", "floor": "tests.floor_work"}


def reset(client: Any, prefix: str) -> None:
    """Nothing left from the last mode: records, limits, queue, store rows."""
    from bench.scheduler_env import purge
    from tests.support.rate_tasks import runs_key

    client.delete(runs_key(), f"{prefix}:rate:stats")
    for key in client.scan_iter(match=f"{prefix}:rate:*"):
        client.delete(key)
    purge()
    pg(f"DELETE FROM {ENVIRONMENT.schema}.due_jobs")


def start_workers(mode: str, keys: int, env: dict[str, str]) -> list[Any]:
    """One worker with 2 processes; Celery's modes 2 workers of 1 (its limit is per
    worker instance: "2 workers" is then 2 buckets)."""
    from tasks.app import app
    from tasks.cli.worker import celery_executable
    from tests.support.processes import spawn, wait_for_worker
    from tests.support.rate_tasks import INCLUDE

    if mode == "celery_sized":
        env = {**env, "RECURTEST_CELERY_RATE": f"{keys * RATE / 2:g}/s"}
    shape = [("a", 1), ("b", 1)] if mode.startswith("celery") else [("a", 2)]
    logs, started = log_dir(mode), []
    for name, procs in shape:
        node = f"rate-{mode}-{name}@bench"
        worker = spawn(f"worker-{name}", [
            celery_executable(), "-A", "tasks", "worker", "-Q", "short", "-n", node,
            "-c", str(procs), "-l", LOG_LEVEL, "--without-mingle", "--without-gossip",
            "--include", INCLUDE], logs, env)
        started.append(worker)
        wait_for_worker(app, worker, node)
    return started


def run_mode(mode: str, keys: int, jobs: int, timeout: float, celery_seconds: float
             ) -> dict[str, Any]:
    from routing.redis_client import get_redis
    from tasks.app import app
    from tasks.flow.limiter import all_counts
    from tests.support.processes import recur_argv, spawn
    from tests.support.rate_tasks import read_starts

    client, prefix = get_redis(), ENVIRONMENT.environment()["RECUR_KEY_PREFIX"]
    reset(client, prefix)
    sent = messages(keys, jobs, hot=mode in ("recur_hot", "celery_sized"))
    task, began = app.tasks[TASKS[mode]], time.monotonic()
    for msg in sent:  # all in the queue before a worker starts: the workers are measured
        task.apply_async((msg,))
    published_s = time.monotonic() - began
    env = {**os.environ, **ENVIRONMENT.environment(RECUR_WORK_SCALE="0"),
           "RECUR_SCHEDULER_INTERVAL": "0.1", "RECUR_LOG_LEVEL": "WARNING"}
    sched = spawn("scheduler", recur_argv("scheduler"), log_dir(mode), env)
    workers = start_workers(mode, keys, env)
    meter = CpuMeter([w.pid for w in workers], sched.pid)
    others = sum(1 for m in sent if m["user_id"] != "hot")
    window = celery_seconds if mode.startswith("celery") else None
    try:
        calls_before = script_calls(client)
        with meter.measuring():
            if window is not None:  # Celery's limits take far longer: a window of them
                wait_until(lambda: bool(client.llen(_runs())), timeout)
                time.sleep(window + 0.5)
            else:  # the hot key's backlog takes 100x as long: not awaited. The starts
                # are read only once there are enough (reading them all every poll
                # takes a share of the CPU the run is measuring)
                wait_until(lambda: client.llen(_runs()) >= others and sum(
                    1 for s in read_starts(client) if s["key"] != "hot") >= others,
                    timeout, poll=0.5)
    finally:
        for worker in workers:
            worker.stop()
        sched.stop()
    calls = script_calls(client) - calls_before
    counts = all_counts(client, prefix)
    busy = sum(n for (kind, _), n in counts.items() if kind == "busy")
    out = {"mode": mode, "task": TASKS[mode], "publish_s": round(published_s, 1),
           **figures(read_starts(client), sent, busy, keys * RATE, window),
           "slotted_at_publish": sum(n for (kind, _), n in counts.items() if kind == "slotted"),
           # Redis script calls per job while the workers ran (EVALSHA and EVAL, from
           # every client of the shared Redis: 1.0 is one limit call a job, more are
           # retakes after a near refusal, or other work on the same Redis)
           "script_calls_per_job": round(calls / len(sent), 3) if sent else 0.0,
           "cpu_s": meter.used, "load_1m": round(os.getloadavg()[0], 2)}
    print(out, flush=True)
    return out


def script_calls(client: Any) -> int:
    """EVALSHA and EVAL calls the Redis server has answered so far."""
    stats = client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))
               for name in ("evalsha", "eval"))


def _runs() -> str:
    from tests.support.rate_tasks import runs_key

    return runs_key()


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The issue's targets, from the modes that ran: a mode named more than once in
    ``--modes`` (repeats, interleaved) counts with the median of its runs' rates."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        runs.setdefault(row["mode"], []).append(row)

    def rate(mode: str) -> float | None:
        rates = [r["others_per_s"] for r in runs.get(mode, []) if r.get("others_per_s")]
        return statistics.median(rates) if rates else None

    out: dict[str, Any] = {"repeats": {mode: len(found) for mode, found in runs.items()}}
    cap, rec, allowed = rate("capacity"), rate("recur"), None
    if rec is not None:
        allowed = runs["recur"][0]["allowed_per_s"]
    if cap and rec and allowed:
        out["capacity_per_s"] = cap
        out["recur_per_s"] = rec
        out["recur_vs_min_allowed_capacity"] = round(rec / min(allowed, cap), 3)
    floor = rate("floor")
    if cap and floor:  # one Redis call a job, deciding nothing: any such limit's ceiling
        out["floor_vs_capacity"] = round(floor / cap, 3)
        if rec:
            out["recur_vs_floor"] = round(rec / floor, 3)
    hot = rate("recur_hot")
    if rec and hot:
        out["others_with_hot_vs_without"] = round(hot / rec, 3)
    for mode in ("recur", "recur_hot"):
        for found in runs.get(mode, []):
            out[f"{mode}_busy_returns_per_job"] = max(
                out.get(f"{mode}_busy_returns_per_job", 0.0), found["busy_returns_per_job"])
            out[f"{mode}_keys_over_limit"] = max(out.get(f"{mode}_keys_over_limit", 0),
                                                 found["keys_over_limit"])
            out[f"{mode}_order_inversions"] = max(
                out.get(f"{mode}_order_inversions", 0), found["order_inversions"])
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=300,
                        help="seconds a mode may take at most")
    parser.add_argument("--celery-seconds", type=float, default=20,
                        help="how long the celery mode (10/s in all) is watched")
    parser.add_argument("--modes", default=",".join(m for m in MODES if m != "floor"))
    parser.add_argument("--result", default="rate_limit")
    opts = parser.parse_args(argv)
    modes = [m for m in opts.modes.split(",") if m]
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        parser.error(f"unknown mode {unknown[0]!r}: choose from {', '.join(MODES)}")
    ENVIRONMENT.setup()
    try:
        load_before = os.getloadavg()
        rows = [run_mode(mode, opts.keys, opts.jobs, opts.timeout, opts.celery_seconds)
                for mode in modes]
        write_result(opts.result, {
            "command": " ".join(["python -m bench.bench_rate_limit", *argv]),
            "load_before": load_before, "modes": rows,
            "summary": summary(rows)})
    finally:
        from routing.redis_client import get_redis
        from scheduler.store import close_stores

        close_stores()
        ENVIRONMENT.teardown()
        client = get_redis()  # the run's records, counters and limits
        for key in client.scan_iter(match=f"{ENVIRONMENT.environment()['RECUR_KEY_PREFIX']}:*"):
            client.delete(key)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
