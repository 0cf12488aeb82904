"""I/O-heavy recurring work: recur's I/O bucket against prefork, plain Celery threads and arq.

A local HTTP server (bench/io_server.py, its own process) answers every request
after 100 ms. ``--messages`` recurring messages each make one request per run
and reschedule themselves ``EVERY`` (10) seconds later, so the offered load is
messages / 10 runs per second. Side by side, one after the other, in one run:

- ``recur_noop``: recur's own full cycle on the I/O bucket's worker, no request
  (the ceiling the I/O bucket is compared with);
- ``recur_io``: recur's I/O bucket, async tasks (``recur worker io``: threads
  pool, one event loop per process) + ``recur scheduler``;
- ``recur_short``: the same request, sync, on the short bucket (prefork 4);
- ``celery_threads``: plain Celery, threads pool at the I/O bucket's
  concurrency, next run by Celery's own countdown (ETA held in the worker);
- ``arq``: asyncio on Redis at the same concurrency, next run by ``_defer_by``.

Per contender: completed runs/s in the window after a warm-up, lag p50/p99
(run start − due time, sampled 1 in 10), worker RSS (max, whole process tree)
and CPU seconds per second by process (worker, scheduler, PostgreSQL, RabbitMQ,
Redis, HTTP server, the machine as a whole: the 2 cores are shared).

    flock /tmp/recur-bench.lock .venv/bin/python -m bench.bench_io [--messages 20000]
        [--seconds 60] [--only recur_io,arq]

Needs the bench extra (arq): pip install -e '.[bench]'.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
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
                    "PYTHONPATH": str(ROOT)}
        os.environ[io_record.PREFIX_VAR] = self.env[io_record.PREFIX_VAR]
        self.children: list[Any] = []
        self.worker: Any = None
        self.scheduler: Any = None

    def spawn(self, name: str, argv: list[str]) -> Any:
        from tasks.processes import spawn

        child = spawn(f"{self.name}-{name}", argv, self.log_dir, self.env, cwd=ROOT)
        self.children.append(child)
        return child

    def stop(self) -> None:
        for child in reversed(self.children):
            child.stop(timeout=20)


def recur_worker(run: Run, bucket: str) -> None:
    from tasks.app import app
    from tasks.processes import recur_argv, wait_for_worker

    node = f"{run.name}@{socket.gethostname()}"
    extra = ["-c", str(run.opts.concurrency)] if bucket == "io" else []
    run.worker = run.spawn("worker", recur_argv("worker", bucket, "-n", node, *extra,
                                                "--without-mingle", "--without-gossip"))
    wait_for_worker(app, run.worker, node)
    run.env["RECUR_LOG_LEVEL"] = "INFO"  # the scheduler's log says what it dispatched when
    run.scheduler = run.spawn("scheduler", recur_argv("scheduler"))
    run.env["RECUR_LOG_LEVEL"] = "WARNING"


def seed_recur(run: Run, task: str, bucket: str) -> None:
    from scheduler.callargs import encode_call
    from scheduler.store import DueStore, Job

    store = DueStore.open(ENVIRONMENT.pg_url)
    now, n = datetime.now(UTC), run.opts.messages
    jobs = []
    for i in range(n):
        due = now + timedelta(seconds=io_record.EVERY * i / n)
        msg = {"id": f"m{i}", "user_id": f"u{i}", "bucket": bucket,
               "payload": {"due": due.timestamp()}}
        jobs.append(Job(msg["id"], task, bucket, encode_call([msg], {}, job_key=msg["id"],
                                                             bucket=bucket), due))
    for i in range(0, n, 5000):
        store.schedule(jobs[i:i + 5000], now)
    store.close()


def start_recur(task: str, bucket: str) -> Callable[[Run], None]:
    def start(run: Run) -> None:
        recur_worker(run, bucket)
        seed_recur(run, task, bucket)

    return start


def start_celery_threads(run: Run) -> None:
    from bench.io_plain import app as plain
    from bench.io_plain import plain_io
    from tasks.processes import wait_for_worker

    node = f"{run.name}@{socket.gethostname()}"
    celery = str(Path(sys.executable).parent / "celery")
    run.worker = run.spawn("worker", [
        celery, "-A", "bench.io_plain", "worker", "-P", "threads", "-c",
        str(run.opts.concurrency), "-Q", "plainio", "-n", node, "-l", "WARNING",
        "--without-mingle", "--without-gossip"])
    plain.conf.broker_url = ENVIRONMENT.broker_url
    wait_for_worker(plain, run.worker, node)
    n = run.opts.messages
    start = time.time()
    with plain.producer_or_acquire() as producer:
        for i in range(n):
            offset = max(0.0, start + io_record.EVERY * i / n - time.time())
            plain_io.apply_async((f"m{i}", time.time() + offset), countdown=offset,
                                 producer=producer)


def start_arq(run: Run) -> None:
    from tasks.processes import wait_for

    arq = str(Path(sys.executable).parent / "arq")
    run.worker = run.spawn("worker", [arq, "bench.io_arq.WorkerSettings"])
    wait_for(lambda: "Starting worker" in run.worker.log() or run.worker.proc.poll() is not None,
             30, "the arq worker")
    asyncio.run(seed_arq(run.opts.messages, run.env["BENCHIO_ARQ_QUEUE"]))


async def seed_arq(n: int, queue: str) -> None:
    from arq import create_pool
    from arq.connections import RedisSettings

    pool = await create_pool(RedisSettings(host="127.0.0.1", port=6379, max_connections=100))
    start = time.time()
    for i in range(0, n, 50):
        await asyncio.gather(*(pool.enqueue_job(
            "run", f"m{j}", start + io_record.EVERY * j / n,
            _defer_until=datetime.fromtimestamp(start + io_record.EVERY * j / n, UTC),
            _queue_name=queue) for j in range(i, min(n, i + 50))))
    await pool.aclose()


STARTERS: dict[str, Callable[[Run], None]] = {
    "recur_noop": start_recur("bench.io_noop", "io"),
    "recur_io": start_recur("bench.io_async", "io"),
    "recur_short": start_recur("bench.io_sync", "short"),
    "celery_threads": start_celery_threads,
    "arq": start_arq,
}


def groups(run: Run, server_pid: int) -> dict[str, list[int]]:
    """The processes whose CPU is counted, by role."""
    out = {"worker": proc_stats.tree(run.worker.pid), "http_server": [server_pid],
           "postgresql": proc_stats.named("postgres"),
           "rabbitmq": proc_stats.named("beam.smp"),
           "redis": proc_stats.named("redis-server")}
    if run.scheduler is not None:
        out["scheduler"] = proc_stats.tree(run.scheduler.pid)
    return out


def measure(run: Run, server_pid: int) -> dict[str, Any]:
    """Runs/s, lag, RSS and CPU by process over the window after the warm-up."""
    from tasks.redis_conn import get_redis

    time.sleep(WARMUP)
    client = get_redis()
    roles = groups(run, server_pid)
    cpu0 = {role: proc_stats.cpu_seconds(pids) for role, pids in roles.items()}
    busy0, total0 = proc_stats.machine_busy_seconds()
    runs0, _ = io_record.read(client)
    t0 = time.time()
    rss = 0
    while time.time() - t0 < run.opts.seconds - WARMUP:
        time.sleep(2)
        rss = max(rss, proc_stats.rss_bytes(proc_stats.tree(run.worker.pid)))
    runs1, samples = io_record.read(client)
    t1 = time.time()
    busy1, total1 = proc_stats.machine_busy_seconds()
    cpu = {role: round((proc_stats.cpu_seconds(pids) - cpu0[role]) / (t1 - t0), 2)
           for role, pids in roles.items()}
    cpu["machine_busy_cores"] = round((busy1 - busy0) / (t1 - t0), 2)
    cpu["machine_cores"] = round((total1 - total0) / (t1 - t0), 2)
    lags = sorted(lag for at, lag in samples if t0 <= at <= t1)
    return {"runs": runs1 - runs0, "seconds": round(t1 - t0, 1),
            "per_second": round((runs1 - runs0) / (t1 - t0)),
            "lag_p50_s": round(max(0.0, statistics.median(lags)), 3) if lags else None,
            "lag_p99_s": round(max(0.0, lags[int(0.99 * (len(lags) - 1))]), 3) if lags else None,
            "lag_samples": len(lags), "worker_rss_mb": round(rss / 2**20, 1),
            "cpu_cores_by_process": cpu, "load_avg_1m": round(os.getloadavg()[0], 2)}


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
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--only", default=",".join(CONTENDERS))
    opts = parser.parse_args()
    opts.port = free_port()
    from tasks.processes import spawn, wait_for

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
        "setup": {"messages": opts.messages, "every_s": io_record.EVERY,
                  "offered_runs_per_s": round(opts.messages / io_record.EVERY),
                  "request_ms": 100, "seconds": opts.seconds, "warmup_s": WARMUP,
                  "concurrency": opts.concurrency, "logs": str(log_dir)},
        **results,
        "goal": "recur_io >= 1000 runs/s and >= 0.8x recur_noop (same run)",
    }
    if io and noop:
        doc["recur_io_to_noop"] = round(io["per_second"] / max(noop["per_second"], 1), 2)
    return doc


if __name__ == "__main__":
    main()
