"""Worker memory: RSS, PSS and USS of each worker process at rest and under a no-op cycle.

Side by side in one run, each in the bench's own vhost, Redis prefix and schema:

- ``recur_short``: ``recur worker short`` (the short bucket's profile: prefork, 4
  children), the no-op recurring task going round store → ``recur scheduler`` →
  worker → reschedule;
- ``recur_io``: ``recur worker io`` (threads, 200), the same cycle on the io bucket;
- ``celery_cli_short``: ``celery -A tasks worker -Q short`` as a user types it (Celery's
  own command line, with every ``celery.commands`` plugin installed, Flower's too);
- ``plain_celery``: plain Celery (``bench/memory_plain.py``, no recur module) with the
  short bucket's pool, concurrency and prefetch, a no-op task sending itself again.

Per contender, from /proc/PID/smaps_rollup (bench/smaps.py): ``rest`` (started, the
broker answered, ``--rest`` seconds idle), ``cycle_peak`` (the largest figure over
samples every 0.5 s for ``--seconds`` while ``--jobs`` jobs go round) and ``after``
(the cycle stopped, ``--rest`` seconds idle), for the parent, the largest child and the
group. RSS counts pages a prefork parent shares with its children once per process;
PSS shares them out, USS is what the process alone holds. The 1-minute load average
and the machine's busy cores (all processes) are recorded beside each contender.

    flock /tmp/recur-bench.lock .venv/bin/python -m bench.bench_worker_memory \
        [--jobs 2000] [--seconds 10] [--rest 3] [--only recur_short,plain_celery] \
        [--before bench/results/worker_memory_before.json] [--name worker_memory]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import memory_plain, proc_stats, smaps
from bench import scheduler_env as benv  # sets the RECUR_* variables before any settings read
from bench.results_io import write_result  # waits for a quiet machine, then watches it

CONTENDERS = ("recur_short", "recur_io", "celery_cli_short", "plain_celery")
CELERY = str(Path(sys.executable).parent / "celery")
SAMPLE_EVERY = 0.5


class Contender:
    """One worker (and, for recur, one scheduler) with the job count that proves it ran."""

    def __init__(self, name: str, log_dir: Path) -> None:
        self.name, self.log_dir = name, log_dir
        self.node = f"mem-{name}-{benv.RUN}@{socket.gethostname()}"
        self.env = {**os.environ, **benv.ENV, "RECUR_IMPORTS": "bench.scheduler_tasks",
                    "PYTHONPATH": str(benv.ROOT)}
        self.worker: Any = None
        self.scheduler: Any = None

    def argv(self) -> list[str]:
        from tests.support.processes import recur_argv

        if self.name == "recur_short":
            return recur_argv("worker", "short", "-n", self.node)
        if self.name == "recur_io":
            return recur_argv("worker", "io", "-n", self.node)
        if self.name == "celery_cli_short":
            return [CELERY, "-A", "tasks", "worker", "-Q", "short", "-n", self.node,
                    "-l", "WARNING"]
        return [CELERY, "-A", "bench.memory_plain", "worker", "-Q", memory_plain.QUEUE,
                "-P", "prefork", "-c", "4", "--prefetch-multiplier", "4", "-n", self.node,
                "-l", "WARNING"]

    @property
    def plain(self) -> bool:
        return self.name == "plain_celery"

    def start(self) -> None:
        from tasks.app import app
        from tests.support.processes import spawn, wait_for_worker

        self.worker = spawn(self.name, self.argv(), self.log_dir, self.env, cwd=benv.ROOT)
        wait_for_worker(app, self.worker, self.node)

    def runs(self) -> int:
        from bench.scheduler_tasks import runs_key

        key = memory_plain.runs_key() if self.plain else runs_key()
        return int(_redis().get(key) or 0)

    def begin_cycle(self, jobs: int) -> None:
        """Put ``jobs`` no-op jobs in circulation."""
        from tests.support.processes import recur_argv, spawn

        if self.plain:
            memory_plain.app.conf.broker_url = benv.BROKER_URL
            with memory_plain.app.producer_or_acquire() as producer:
                for i in range(jobs):
                    memory_plain.noop.apply_async(({"id": f"j{i}"},), producer=producer)
            return
        bucket = "io" if self.name == "recur_io" else "short"
        benv.pg(f"TRUNCATE {benv.SCHEMA}.due_jobs")
        benv.pg(benv.seed_sql(jobs, bucket, "now()", task="bench.noop_recurring"))
        self.scheduler = spawn(f"{self.name}-scheduler", recur_argv("scheduler"),
                               self.log_dir, self.env, cwd=benv.ROOT)

    def end_cycle(self) -> None:
        """Stop the circulation and wait until the last job has run."""
        if self.plain:
            _redis().set(memory_plain.stop_key(), 1)
        elif self.scheduler is not None:
            self.scheduler.stop()
        last, deadline = -1, time.monotonic() + 30
        while (now := self.runs()) != last and time.monotonic() < deadline:
            last = now
            time.sleep(1.0)

    def stop(self) -> None:
        for child in (self.scheduler, self.worker):
            if child is not None:
                child.stop(timeout=20)


def _redis() -> Any:
    from routing.redis_client import get_redis

    return get_redis()


def machine_load() -> dict[str, float]:
    busy, total = proc_stats.machine_busy_seconds()
    return {"load_avg_1m": round(os.getloadavg()[0], 2), "busy": busy, "total": total}


def busy_cores(before: dict[str, float], after: dict[str, float]) -> float:
    """Cores the whole machine kept busy between two readings (every process)."""
    seconds = (after["total"] - before["total"]) / (os.cpu_count() or 1)
    return round((after["busy"] - before["busy"]) / max(seconds, 1e-9), 2)


def measure(name: str, opts: argparse.Namespace, log_dir: Path) -> dict[str, Any]:
    contender = Contender(name, log_dir)
    load0 = machine_load()
    try:
        contender.start()
        time.sleep(opts.rest)
        rest = smaps.group(contender.worker.pid)
        runs0, t0 = contender.runs(), time.monotonic()
        contender.begin_cycle(opts.jobs)
        samples = []
        while time.monotonic() - t0 < opts.seconds:
            samples.append(smaps.group(contender.worker.pid))
            time.sleep(SAMPLE_EVERY)
        runs1, t1 = contender.runs(), time.monotonic()
        load1 = machine_load()
        contender.end_cycle()
        time.sleep(opts.rest)
        after = smaps.group(contender.worker.pid)
    finally:
        contender.stop()
    return {"command": " ".join(Path(a).name if a == CELERY else a
                                for a in contender.argv()),
            "rest": rest, "cycle_peak": smaps.peak(samples), "cycle_last": samples[-1],
            "after": after, "cycle_runs": runs1 - runs0,
            "cycle_runs_per_s": round((runs1 - runs0) / (t1 - t0)),
            "load_avg_1m": [load0["load_avg_1m"], load1["load_avg_1m"]],
            "machine_busy_cores": busy_cores(load0, load1)}


def summary(figures: dict[str, Any]) -> dict[str, Any]:
    """Per contender: the parent's and the largest child's rss / pss / uss, at rest and
    at the cycle's peak (MB), the figures the goal (<= 60 MB a process) is read against."""
    out = {}
    for name, f in figures.items():
        rest_child = max(f["rest"]["children"], key=lambda c: c["rss"], default=None)
        out[name] = {"rest_parent": f["rest"]["parent"], "rest_child": rest_child,
                     "cycle_parent": f["cycle_peak"]["parent"],
                     "cycle_child": f["cycle_peak"]["child_max"] or None,
                     "rest_total": f["rest"]["total"], "cycle_total": f["cycle_peak"]["total"]}
    return out


def print_table(figures: dict[str, Any]) -> None:
    print(f"{'MB (rss/pss/uss)':34s} {'rest':>20s} {'cycle peak':>20s}  runs/s  load")
    for name, f in figures.items():
        rows: list[tuple[str, Callable[[dict[str, Any]], Any]]] = [
            ("parent", lambda s: s["parent"]),
            ("largest child", lambda s: max(s["children"], key=lambda c: c["rss"],
                                            default=None)),
            ("group", lambda s: s["total"])]
        for role, pick in rows:
            rest = pick(f["rest"])
            peak = f["cycle_peak"]["child_max" if role == "largest child" else
                                   "total" if role == "group" else "parent"]
            if not rest:
                continue
            cell = "/".join(f"{rest[k]:.0f}" for k in ("rss", "pss", "uss"))
            top = "/".join(f"{peak.get(k, 0):.0f}" for k in ("rss", "pss", "uss"))
            print(f"{name + ' ' + role:34s} {cell:>20s} {top:>20s}  "
                  f"{f['cycle_runs_per_s']:6d}  {f['load_avg_1m']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rest", type=float, default=3.0)
    parser.add_argument("--only", default=",".join(CONTENDERS))
    parser.add_argument("--before", type=Path, help="an earlier run's JSON, kept as 'before'")
    parser.add_argument("--name", default="worker_memory", help="bench/results/<name>.json")
    opts = parser.parse_args()
    log_dir = Path(tempfile.mkdtemp(prefix="recur-bench-memory-"))
    benv.setup()
    figures = {}
    try:
        for name in opts.only.split(","):
            if name not in CONTENDERS:
                parser.error(f"unknown contender {name!r} (one of {', '.join(CONTENDERS)})")
            figures[name] = measure(name, opts, log_dir)
            benv.purge("io" if name == "recur_io" else "short")
    finally:
        benv.teardown()
    print_table(figures)
    doc: dict[str, Any] = {"jobs": opts.jobs, "cycle_seconds": opts.seconds,
                           "rest_seconds": opts.rest, "logs": str(log_dir),
                           "goal": "each worker process <= 60 MB (USS / PSS) at rest and "
                                   "under the cycle", "summary": summary(figures),
                           "contenders": figures}
    if opts.before is not None:
        doc["before"] = json.loads(opts.before.read_text()).get("summary")
    write_result(opts.name, doc)


if __name__ == "__main__":
    main()
