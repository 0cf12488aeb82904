"""I/O-heavy recurring work: recur's I/O bucket against prefork, plain Celery threads and arq.

A local HTTP server (bench/io_server.py, its own process) answers every request
after 100 ms. ``--messages`` recurring messages each make one request per run
and reschedule themselves ``EVERY`` (10) seconds later, so the offered load is
messages / 10 runs per second. Side by side, one after the other, in one run:

- ``recur_noop``: recur's own full cycle on the I/O bucket's worker, no request
  (the ceiling the I/O bucket is compared with);
- ``recur_io``: recur's I/O bucket, async tasks (``recur worker io``: threads
  pool, one event loop per process; ``--processes`` of them, one per core by
  default) + ``recur scheduler``;
- ``recur_short``: the same request, sync, on the short bucket (prefork 4);
- ``celery_threads``: plain Celery, threads pool at the I/O bucket's
  concurrency and processes, next run by Celery's own countdown (ETA held in
  the worker);
- ``arq``: asyncio on Redis at the same concurrency and processes, next run by
  ``_defer_by``;
- ``recur_noop_sync`` and ``celery_noop``: the no-op cycle of the peers' harness, a
  plain (sync) task that only records itself and runs again, on recur's I/O bucket
  worker (threads) and on plain Celery threads, for the no-op cycle mode:

    flock /tmp/recur-bench.lock .venv/bin/python -m bench.bench_io --every 2
        --concurrency 4 --only recur_noop_sync,celery_noop   (20k jobs every 2 s,
        2 workers x 4 threads; the goal: recur >= 2,100 runs/s)

Per contender: completed runs/s in the window after a warm-up, lag p50/p99
(run start − due time, sampled 1 in 10), worker RSS (max, all its processes),
and by process (workers, scheduler, PostgreSQL, RabbitMQ, Redis, HTTP server;
the services' figures include other users of them) the cores used and the CPU
milliseconds per run, from /proc/<pid>/stat (utime + stime, with reaped
children). CPU per run moves far less with the machine's load than runs/s, so
``ceiling_runs_per_s`` (the machine's cores ÷ the total CPU per run) says what
the same code would reach with the cores to itself; the 1-minute load average
at the window's start and end is beside it.

    flock /tmp/recur-bench.lock .venv/bin/python -m bench.bench_io [--messages 20000]
        [--seconds 60] [--processes 2] [--concurrency 100] [--every 10]
        [--only recur_io,arq] [--profile DIR]   (RECURBENCH_RESULTS=DIR: write elsewhere)

Needs the bench extra (arq): pip install -e '.[bench]'; ``--profile`` needs py-spy.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.private_env import PrivateEnv

ENVIRONMENT = PrivateEnv("io").activate()
ROOT = Path(__file__).resolve().parents[1]

from bench import io_record, proc_stats  # noqa: E402 - after the environment is set
from bench.results_io import write_result  # noqa: E402

CONTENDERS = ("recur_noop", "recur_io", "recur_short", "celery_threads", "arq")
#: The no-op cycle's contenders (not run unless named in --only).
NOOP_CONTENDERS = ("recur_noop_sync", "celery_noop")
WARMUP = 10.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Run:
    """One contender's processes, environment and figures."""

    def __init__(self, name: str, opts: argparse.Namespace, server_url: str,
                 log_dir: Path) -> None:
        self.name, self.opts, self.log_dir = name, opts, log_dir
        self.env = {**os.environ, **ENVIRONMENT.environment(),
                    "RECUR_IMPORTS": "bench.io_tasks", "BENCHIO_URL": server_url,
                    io_record.PREFIX_VAR: f"{ENVIRONMENT.vhost}:{name}",
                    "BENCHIO_ARQ_QUEUE": f"{ENVIRONMENT.vhost}:arq",
                    "BENCHIO_CONCURRENCY": str(opts.concurrency),
                    io_record.EVERY_VAR: str(opts.every),
                    "PYTHONPATH": str(ROOT)}
        os.environ[io_record.PREFIX_VAR] = self.env[io_record.PREFIX_VAR]
        self.children: list[Any] = []
        self.workers: list[Any] = []
        self.scheduler: Any = None

    def spawn(self, name: str, argv: list[str]) -> Any:
        from tests.support.processes import spawn

        child = spawn(f"{self.name}-{name}", argv, self.log_dir, self.env, cwd=ROOT)
        self.children.append(child)
        return child

    def stop(self) -> None:
        for child in reversed(self.children):
            child.stop(timeout=20)


def recur_worker(run: Run, bucket: str) -> None:
    from tasks.app import app
    from tests.support.processes import recur_argv, wait_for_worker

    extra = ["-c", str(run.opts.concurrency)] if bucket == "io" else []
    for i in range(run.opts.processes if bucket == "io" else 1):
        node = f"{run.name}{i}@{socket.gethostname()}"
        worker = run.spawn(f"worker{i}", recur_argv("worker", bucket, "-n", node, *extra,
                                                    "--without-mingle", "--without-gossip"))
        wait_for_worker(app, worker, node)
        run.workers.append(worker)
    run.env["RECUR_LOG_LEVEL"] = "INFO"  # the scheduler's log says what it dispatched when
    run.scheduler = run.spawn("scheduler", recur_argv("scheduler"))
    run.env["RECUR_LOG_LEVEL"] = "WARNING"


def seed_recur(run: Run, task: str, bucket: str) -> None:
    from scheduler.store import DueStore, Job
    from scheduler.wire import encode_call

    store = DueStore.open(ENVIRONMENT.pg_url)
    now, n = datetime.now(UTC), run.opts.messages
    jobs = []
    for i in range(n):
        due = now + timedelta(seconds=run.opts.every * i / n)
        key = f"m{i}"
        msg = {"id": key, "user_id": f"u{i}", "bucket": bucket,
               "payload": {"due": due.timestamp()}}
        jobs.append(Job(key, task, bucket, encode_call([msg], {}, job_key=key, bucket=bucket),
                        due))
    for i in range(0, n, 5000):
        store.schedule(jobs[i:i + 5000], now)
    store.close()


def start_recur(task: str, bucket: str) -> Callable[[Run], None]:
    def start(run: Run) -> None:
        recur_worker(run, bucket)
        seed_recur(run, task, bucket)

    return start


def start_celery_threads(run: Run, noop: bool = False) -> None:
    from bench.io_plain import app as plain
    from bench.io_plain import plain_io, plain_noop
    from tests.support.processes import wait_for_worker

    task = plain_noop if noop else plain_io
    celery = str(Path(sys.executable).parent / "celery")
    plain.conf.broker_url = ENVIRONMENT.broker_url
    for i in range(run.opts.processes):
        node = f"{run.name}{i}@{socket.gethostname()}"
        worker = run.spawn(f"worker{i}", [
            celery, "-A", "bench.io_plain", "worker", "-P", "threads", "-c",
            str(run.opts.concurrency), "-Q", "plainio", "-n", node, "-l", "WARNING",
            "--without-mingle", "--without-gossip"])
        wait_for_worker(plain, worker, node)
        run.workers.append(worker)
    n = run.opts.messages
    start = time.time()
    with plain.producer_or_acquire() as producer:
        for i in range(n):
            offset = max(0.0, start + run.opts.every * i / n - time.time())
            task.apply_async((f"m{i}", time.time() + offset), countdown=offset,
                                 producer=producer)


def start_arq(run: Run) -> None:
    from tests.support.processes import wait_for

    arq = str(Path(sys.executable).parent / "arq")
    for i in range(run.opts.processes):
        worker = run.spawn(f"worker{i}", [arq, "bench.io_arq.WorkerSettings"])
        wait_for(functools.partial(_arq_started, worker), 30, "the arq worker")
        run.workers.append(worker)
    asyncio.run(seed_arq(run.opts.messages, run.env["BENCHIO_ARQ_QUEUE"], run.opts.every))


def _arq_started(worker: Any) -> bool:
    return "Starting worker" in worker.log() or worker.proc.poll() is not None


async def seed_arq(n: int, queue: str, every: float) -> None:
    from arq import create_pool
    from arq.connections import RedisSettings

    pool = await create_pool(RedisSettings(host="127.0.0.1", port=6379, max_connections=100))
    start = time.time()
    for i in range(0, n, 50):
        await asyncio.gather(*(pool.enqueue_job(
            "run", f"m{j}", start + every * j / n,
            _defer_until=datetime.fromtimestamp(start + every * j / n, UTC),
            _queue_name=queue) for j in range(i, min(n, i + 50))))
    await pool.aclose()


STARTERS: dict[str, Callable[[Run], None]] = {
    "recur_noop": start_recur("bench.io_noop", "io"),
    "recur_io": start_recur("bench.io_async", "io"),
    "recur_short": start_recur("bench.io_sync", "short"),
    "celery_threads": start_celery_threads,
    "arq": start_arq,
    "recur_noop_sync": start_recur("bench.io_noop_sync", "io"),
    "celery_noop": functools.partial(start_celery_threads, noop=True),
}


def groups(run: Run, server_pid: int) -> dict[str, list[int]]:
    """The processes whose CPU is counted, by role (the services' include other users')."""
    out = {"worker": [pid for w in run.workers for pid in proc_stats.tree(w.pid)],
           "http_server": [server_pid],
           "postgresql": proc_stats.named("postgres"),
           "rabbitmq": proc_stats.named("beam.smp"),
           "redis": proc_stats.named("redis-server")}
    if run.scheduler is not None:
        out["scheduler"] = proc_stats.tree(run.scheduler.pid)
    return out


def snapshot(run: Run, server_pid: int) -> dict[str, dict[int, float]]:
    return {role: proc_stats.cpu_snapshot(pids)
            for role, pids in groups(run, server_pid).items()}


def cpu_figures(before: dict[str, dict[int, float]], after: dict[str, dict[int, float]],
                seconds: float, runs: int, machine: tuple[float, float]
                ) -> dict[str, Any]:
    """Cores busy by role, CPU milliseconds per run by role, and the rate the total
    per-run CPU allows on the machine's cores (its ceiling, whatever the load)."""
    used = {role: proc_stats.cpu_between(before[role], after[role]) for role in after}
    per_run = {role: round(1000 * cpu / max(runs, 1), 3) for role, cpu in used.items()}
    total_ms = sum(per_run.values())
    cores = machine[1]
    return {"cpu_cores_by_process": {**{role: round(cpu / seconds, 2)
                                        for role, cpu in used.items()},
                                     "machine_busy_cores": round(machine[0], 2),
                                     "machine_cores": round(cores, 2)},
            "cpu_ms_per_run": {**per_run, "total": round(total_ms, 3)},
            "ceiling_runs_per_s": round(1000 * cores / total_ms) if total_ms else None}


def measure(run: Run, server_pid: int) -> dict[str, Any]:
    """Runs/s, lag, RSS and CPU by process over the window after the warm-up."""
    from routing.redis_client import get_redis

    time.sleep(WARMUP)
    client = get_redis()
    load0 = os.getloadavg()[0]
    cpu0 = snapshot(run, server_pid)
    busy0, total0 = proc_stats.machine_busy_seconds()
    runs0, _ = io_record.read(client)
    t0 = time.time()
    profilers = profile(run, run.opts.seconds - WARMUP)
    rss = 0
    while time.time() - t0 < run.opts.seconds - WARMUP:
        time.sleep(2)
        rss = max(rss, proc_stats.rss_bytes(groups(run, server_pid)["worker"]))
    runs1, samples = io_record.read(client)
    t1 = time.time()
    cpu1 = snapshot(run, server_pid)
    busy1, total1 = proc_stats.machine_busy_seconds()
    for profiler in profilers:
        stop_profiler(profiler)
    runs = runs1 - runs0
    lags = sorted(lag for at, lag in samples if t0 <= at <= t1)
    return {"runs": runs, "seconds": round(t1 - t0, 1),
            "per_second": round(runs / (t1 - t0)),
            "lag_p50_s": round(max(0.0, statistics.median(lags)), 3) if lags else None,
            "lag_p99_s": round(max(0.0, lags[int(0.99 * (len(lags) - 1))]), 3) if lags else None,
            "lag_samples": len(lags), "worker_rss_mb": round(rss / 2**20, 1),
            **cpu_figures(cpu0, cpu1, t1 - t0, runs,
                          ((busy1 - busy0) / (t1 - t0), (total1 - total0) / (t1 - t0))),
            "load_avg_1m": [round(load0, 2), round(os.getloadavg()[0], 2)]}


def profile(run: Run, seconds: float) -> list[subprocess.Popen[bytes]]:
    """With --profile DIR: py-spy samples the thread holding the GIL (CPU, not waits) of
    each worker and the scheduler over the window, as collapsed stacks in
    DIR/<contender>-<role>-<pid>.txt. Sampling costs CPU: take figures from runs without
    it. py-spy is not a dependency (pip install py-spy)."""
    if not run.opts.profile:
        return []
    spy = str(Path(sys.executable).parent / "py-spy")
    targets = [("worker", w.pid) for w in run.workers]
    if run.scheduler is not None:
        targets.append(("scheduler", run.scheduler.pid))
    out = Path(run.opts.profile)
    out.mkdir(parents=True, exist_ok=True)
    return [subprocess.Popen([spy, "record", "--format", "raw", "--gil", "--nonblocking",
                              "--rate", "100",
                              "--duration", str(int(seconds)), "--pid", str(pid),
                              "-o", str(out / f"{run.name}-{role}-{pid}.txt")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for role, pid in targets]


def stop_profiler(profiler: subprocess.Popen[bytes]) -> None:
    """Let py-spy write its samples; stop it if it lags far behind its duration."""
    try:
        profiler.wait(timeout=30)
    except subprocess.TimeoutExpired:
        profiler.terminate()
        profiler.wait(timeout=30)


def reset() -> None:
    from bench.private_env import pg
    from tasks.app import app

    pg(f"TRUNCATE {ENVIRONMENT.schema}.due_jobs")
    with app.connection_for_write() as conn, conn.channel() as channel:
        for queue in ("io", "short"):
            channel.queue_purge(queue)


def contender(name: str, opts: argparse.Namespace, server: Any, log_dir: Path) -> dict[str, Any]:
    reset()
    run = Run(name, opts, f"http://127.0.0.1:{opts.port}/", log_dir)
    try:
        STARTERS[name](run)
        figures = measure(run, server.pid)
    finally:
        run.stop()
    print(f"{name}: {figures}", flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--concurrency", type=int, default=100,
                        help="tasks at once per worker process (not the short bucket's)")
    parser.add_argument("--processes", type=int, default=2,
                        help="worker processes of the io bucket, plain Celery and arq")
    parser.add_argument("--profile", metavar="DIR",
                        help="py-spy each worker and the scheduler into DIR (needs py-spy)")
    parser.add_argument("--every", type=float, default=10.0,
                        help="seconds between two runs of a message (the no-op cycle: 2)")
    parser.add_argument("--only", default=",".join(CONTENDERS),
                        help=f"contenders, of {', '.join(CONTENDERS + NOOP_CONTENDERS)}")
    opts = parser.parse_args()
    unknown = set(opts.only.split(",")) - set(STARTERS)
    if unknown or opts.every <= 0:
        parser.exit(2, f"recur: --only: unknown contender(s) {', '.join(sorted(unknown))}\n"
                    if unknown else "recur: --every must be above 0\n")
    opts.port = free_port()
    from tests.support.processes import spawn, wait_for

    ENVIRONMENT.setup()
    log_dir = Path(tempfile.mkdtemp(prefix="recur-bench-io-"))
    server = spawn("http-server", [sys.executable, "-m", "bench.io_server", "--port",
                                   str(opts.port)], log_dir, cwd=ROOT)
    wait_for(lambda: _listening(opts.port), 10, "the HTTP server")
    results: dict[str, Any] = {}
    try:
        for name in opts.only.split(","):
            try:
                results[name] = contender(name, opts, server, log_dir)
            except Exception as exc:  # one contender failing must not lose the others
                results[name] = {"error": f"{type(exc).__name__}: {exc}"}
                print(f"{name} failed: {exc!r}", flush=True)
    finally:
        server.stop()
        from scheduler.store import close_stores

        close_stores()
        ENVIRONMENT.teardown()
    write_result("io", summary(opts, results, log_dir))


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def summary(opts: argparse.Namespace, results: dict[str, Any], log_dir: Path) -> dict[str, Any]:
    io, noop = results.get("recur_io"), results.get("recur_noop")
    doc: dict[str, Any] = {
        "command": "python -m bench.bench_io " + " ".join(sys.argv[1:]),
        "setup": {"messages": opts.messages, "every_s": opts.every,
                  "offered_runs_per_s": round(opts.messages / opts.every),
                  "request_ms": 100, "seconds": opts.seconds, "warmup_s": WARMUP,
                  "concurrency": opts.concurrency, "processes": opts.processes,
                  "logs": str(log_dir)},
        **results,
        "goal": "recur_io >= 1000 runs/s and >= 0.8x recur_noop (same run)",
    }
    if io and noop:
        doc["recur_io_to_noop"] = round(io["per_second"] / max(noop["per_second"], 1), 2)
    mine, plain = results.get("recur_noop_sync"), results.get("celery_noop")
    if mine and plain and "per_second" in mine and "per_second" in plain:
        doc["goal_noop"] = "recur_noop_sync >= 2100 runs/s (20k jobs every 2 s, 2 x 4 threads)"
        doc["recur_noop_to_celery"] = round(mine["per_second"] / max(plain["per_second"], 1), 2)
    return doc


if __name__ == "__main__":
    main()
