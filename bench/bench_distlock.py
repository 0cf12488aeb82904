"""Per-user lock benchmarks, each with its baseline in the same run.

1. Overhead: one acquire + release pair on the same Redis, median and p99 in µs:
   a bare ``SET NX PX`` + Lua compare-and-delete pair (the floor), redis-py's
   own ``Lock``, and recur's lock (acquire + release, and with the per-job
   numbering done at publish time added).
2. Contention: one hot user with ``--hot`` queued jobs among ``--others``
   other users' jobs (one each), on 4 worker processes (2 workers x
   concurrency 2). recur's lock with the default chain (parked jobs run by
   the releasing process, then through the broker) and with
   RECUR_LOCK_CHAIN_SECONDS=0 (every handover through the broker), against
   plain retry-on-busy (redis-py ``Lock``, ``self.retry(countdown=0)`` while
   the user is busy). Two references for the other users' throughput: the
   same 1,500 jobs with the hot user's jobs spread over distinct users (the
   same load without the contention) and the other users' jobs alone.
   Reports busy re-enqueues per executed job, order inversions, the hot
   user's makespan against its serial lower bound (the sum of its job
   durations) and the others' throughput.

Runs in its own RabbitMQ vhost and Redis key prefix, removed afterwards.

    python -m bench.bench_distlock [--pairs 3000] [--hot 500] [--others 1000] [--ms 10]
                                   [--parts overhead,contention]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

RUN = uuid.uuid4().hex[:8]
VHOST = f"recur-bench-distlock-{RUN}"
PREFIX = f"recur-bench-distlock-{RUN}"
ENV = {"RECUR_BROKER_URL": f"amqp://guest:guest@127.0.0.1:5672/{VHOST}",
       "RECUR_KEY_PREFIX": PREFIX, "RECUR_LOG_LEVEL": "WARNING"}
ROOT = Path(__file__).resolve().parents[1]


def rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", *args], check=True, capture_output=True, timeout=120)


def percentiles(samples: list[float]) -> dict[str, float]:
    samples = sorted(samples)
    return {"median_us": round(statistics.median(samples), 1),
            "p99_us": round(samples[int(len(samples) * 0.99) - 1], 1)}


def no_setup(user: str) -> Any:
    return None


Variant = tuple[Any, Any]  # (pair(user, ready), setup(user) -> ready, untimed)


def timed_pairs(pairs: int, variants: dict[str, Variant]) -> dict[str, dict[str, float]]:
    """Time each variant's ``pair(user, setup(user))``, interleaved in rounds of 100 so
    a load change on the shared machine hits every variant alike. ``setup`` is the
    untimed, publisher-side part."""
    lat: dict[str, list[float]] = {name: [] for name in variants}
    for pair, setup in variants.values():  # warm connections and script caches
        for i in range(100):
            pair(f"warm-{i}", setup(f"warm-{i}"))
    for start in range(0, pairs, 100):
        for name, (pair, setup) in variants.items():
            for i in range(start, min(start + 100, pairs)):
                user = f"u{i % 1000}"
                ready = setup(user)
                t0 = time.perf_counter()
                pair(user, ready)
                lat[name].append((time.perf_counter() - t0) * 1e6)
    return {name: percentiles(samples) for name, samples in lat.items()}


def overhead(pairs: int) -> dict[str, Any]:
    """Acquire + release pairs: bare SET NX PX + Lua CAD, redis-py Lock, recur's lock."""
    from tasks.distlock.store import LockStore, new_token
    from tasks.redis_conn import get_redis

    client = get_redis()
    cad = client.register_script(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) "
        "end return 0")
    # One store per variant: a user numbered by one must not wait in another's line.
    store, arrival_store, submit_store = (LockStore(client, f"{PREFIX}:{name}")
                                          for name in ("numbered", "arrival", "submit"))

    def bare(user: str, _: Any) -> None:
        token = new_token()
        key = f"{PREFIX}:bare:{user}"
        assert client.set(key, token, nx=True, px=30_000)
        cad(keys=[key], args=[token])

    def redis_py(user: str, _: Any) -> None:
        lock = client.lock(f"{PREFIX}:redis-py:{user}", timeout=30)
        assert lock.acquire(blocking=False)
        lock.release()

    def pair(lock: LockStore, user: str, seq: int, epoch: str) -> None:
        token = new_token()
        got = lock.acquire(user, token, 30, seq, epoch, "{}", "", 300)
        assert got.status == 1
        lock.release(user, token, got.seq, "done", 30, 300)

    def recur(user: str, ticket: tuple[int, str]) -> None:
        pair(store, user, *ticket)

    def numbered_on_arrival(user: str, _: Any) -> None:
        pair(arrival_store, user, 0, "")

    def submit(user: str, _: Any) -> None:
        submit_store.submit(user)

    figures: dict[str, Any] = {"pairs": pairs, **timed_pairs(pairs, {
        "bare_setnx_cad": (bare, no_setup),
        "redis_py_lock": (redis_py, no_setup),
        # The worker's part: the job was numbered when it was published.
        "recur_lock": (recur, store.submit),
        "recur_lock_numbered_on_arrival": (numbered_on_arrival, no_setup),
        "recur_publish_numbering_alone": (submit, no_setup)})}
    floor = figures["bare_setnx_cad"]["median_us"]
    figures["recur_median_vs_bare"] = round(figures["recur_lock"]["median_us"] / floor, 2)
    figures["goal_median_vs_bare"] = 1.5
    return figures


class Workers:
    """4 worker processes (2 workers x concurrency 2) on the short queue, paused
    until the jobs are all queued so every mode starts from the same backlog."""

    def __init__(self, log_dir: Path, extra_env: dict[str, str]) -> None:
        from tasks.processes import spawn, wait_for_worker

        self.app = _app()
        self.children, self.nodes = [], []
        for i in range(2):
            node = f"bench{i}-{RUN}@{socket.gethostname()}"
            argv = [str(Path(sys.executable).parent / "celery"), "-A", "tasks", "worker",
                    "-Q", "short", "-n", node, "-c", "2", "-l", "WARNING",
                    "--without-mingle", "--without-gossip", "--include", "bench.distlock_tasks"]
            child = spawn(f"bench{i}", argv, log_dir, {**os.environ, **ENV, **extra_env},
                          cwd=ROOT)
            self.children.append(child)
            self.nodes.append(node)
        for child, node in zip(self.children, self.nodes, strict=True):
            wait_for_worker(self.app, child, node)
        self.app.control.cancel_consumer("short", destination=self.nodes, reply=True)

    def go(self) -> None:
        self.app.control.add_consumer("short", destination=self.nodes, reply=True)

    def stop(self) -> None:
        for child in self.children:
            child.stop()


def _app() -> Any:
    from tasks.app import app

    return app


def queue_jobs(task: Any, hot: int, others: int, ms: float,
               spread: bool = False) -> dict[str, list[str]]:
    """The hot user's jobs spread evenly among the other users' single jobs; with
    ``spread`` each of those jobs has a user of its own instead (no contention)."""
    submitted: dict[str, list[str]] = {}
    total = hot + others
    hot_every = total / hot if hot else 0
    hot_sent, other_sent = 0, 0
    for i in range(total):
        if hot and hot_sent < hot and i >= hot_sent * hot_every:
            user, n = (f"spread{hot_sent}", 0) if spread else ("hot", hot_sent)
            hot_sent += 1
        else:
            user, n = f"other{other_sent}", 0
            other_sent += 1
        job_id = f"{user}-{n}"
        task.delay({"id": job_id, "user_id": user, "bucket": "short", "payload": {"ms": ms}})
        submitted.setdefault(user, []).append(job_id)
    return submitted


def inversions(started: list[str], order: list[str]) -> int:
    """Pairs of one user's jobs that started in the opposite order of submission."""
    rank = {job: i for i, job in enumerate(order)}
    ranks = [rank[j] for j in started]
    return sum(1 for i in range(len(ranks)) for j in range(i + 1, len(ranks))
               if ranks[i] > ranks[j])


#: mode -> (task name in bench.distlock_tasks, hot jobs spread over distinct users?,
#: worker environment)
MODES: dict[str, tuple[str, bool, dict[str, str]]] = {
    "recur_lock": ("locked_job", False, {}),
    "recur_lock_chain0": ("locked_job", False, {"RECUR_LOCK_CHAIN_SECONDS": "0"}),
    "retry_on_busy": ("retry_job", False, {}),
    "same_load_spread": ("locked_job", True, {}),
    "others_alone": ("locked_job", False, {}),
}


def contention_run(mode: str, hot: int, others: int, ms: float, log_dir: Path) -> dict[str, Any]:
    from bench import distlock_tasks
    from tasks.distlock.runtime import runtime
    from tasks.processes import wait_for
    from tasks.redis_conn import get_redis

    client = get_redis()
    for key in (distlock_tasks.runs_key(), distlock_tasks.retries_key(),
                distlock_tasks.arrivals_key()):
        client.delete(key)
    stats_before = runtime().store.stats()
    task_name, spread, env = MODES[mode]
    task = getattr(distlock_tasks, task_name)
    workers = Workers(log_dir / mode, env)
    try:
        submitted = queue_jobs(task, hot, others, ms, spread)
        total = hot + others
        workers.go()
        wait_for(lambda: client.llen(distlock_tasks.runs_key()) >= total, 600,
                 f"{mode}: {total} jobs to run", interval=0.2)
    finally:
        workers.stop()
    runs = [json.loads(r) for r in client.lrange(distlock_tasks.runs_key(), 0, -1)]
    arrivals = {str(k): float(v) for k, v in
                client.hgetall(distlock_tasks.arrivals_key()).items()}
    stats = {k: v - stats_before.get(k, 0) for k, v in runtime().store.stats().items()}
    return summarize(mode, runs, submitted, stats,
                     int(client.get(distlock_tasks.retries_key()) or 0), arrivals)


def arrival_bound(hot: list[dict[str, Any]], order: list[str],
                  arrivals: dict[str, float]) -> float:
    """The hot user's best possible makespan given when its messages reached a worker:
    in submission order, each job starts once it has arrived and the one before it
    ended, and lasts as long as it did."""
    by_id = {r["id"]: r for r in hot}
    first = hot[0]["start"]
    end = first
    for job in order:
        run = by_id[job]
        end = max(end, arrivals.get(job, first)) + (run["end"] - run["start"])
    return float(end - first)


def summarize(mode: str, runs: list[dict[str, Any]], submitted: dict[str, list[str]],
              stats: dict[str, int], retries: int,
              arrivals: dict[str, float]) -> dict[str, Any]:
    by_start = sorted(runs, key=lambda r: r["start"])
    hot = [r for r in by_start if r["user"] == "hot"]
    others = [r for r in by_start if r["user"].startswith("other")]
    first = by_start[0]["start"]
    published = stats.get("published", 0)
    reenqueues = retries if mode == "retry_on_busy" else published
    figures: dict[str, Any] = {
        "executed": len(runs), "distinct_jobs": len({r["id"] for r in runs}),
        "others_per_second": round(len(others) / (max(r["end"] for r in others) - first), 1),
        "all_per_second": round(len(runs) / (max(r["end"] for r in runs) - first), 1),
    }
    if mode == "retry_on_busy":
        figures["busy_reenqueues"] = retries
    else:
        figures.update({"parked": stats.get("busy", 0) + stats.get("early", 0),
                        "handovers_through_broker": published,
                        "handovers_run_by_releaser": stats.get("handovers", 0) - published})
        figures["busy_reenqueues"] = reenqueues
    figures["busy_reenqueues_per_executed_job"] = round(reenqueues / len(runs), 3)
    if hot:
        serial = sum(r["end"] - r["start"] for r in hot)
        makespan = max(r["end"] for r in hot) - hot[0]["start"]
        figures.update({
            "hot_order_inversions": inversions([r["id"] for r in hot], submitted["hot"]),
            "hot_makespan_s": round(makespan, 2), "hot_serial_bound_s": round(serial, 2),
            "hot_makespan_vs_serial": round(makespan / serial, 2)})
        bound = arrival_bound(hot, submitted["hot"], arrivals)
        figures.update({"hot_arrival_bound_s": round(bound, 2),
                        "hot_makespan_vs_arrival_bound": round(makespan / bound, 2),
                        "hot_last_arrival_s": round(max(arrivals[j] for j in submitted["hot"])
                                                    - hot[0]["start"], 2)})
    return figures


def contention(hot: int, others: int, ms: float, log_dir: Path,
               modes: list[str]) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "hot_jobs": hot, "other_users": others, "job_ms": ms, "worker_processes": 4,
        **{mode: contention_run(mode, 0 if mode == "others_alone" else hot, others, ms,
                                log_dir) for mode in modes},
        "goals": {"busy_reenqueues_per_executed_job": 0.1, "hot_order_inversions": 0,
                  "hot_makespan_vs_serial": 1.2}}
    for ref, name in (("same_load_spread", "same_load"), ("others_alone", "alone")):
        if ref not in figures:
            continue
        for mode in ("recur_lock", "recur_lock_chain0", "retry_on_busy"):
            if mode in figures:
                ratio = figures[mode]["others_per_second"] / figures[ref]["others_per_second"]
                figures[mode][f"others_per_second_vs_{name}"] = round(ratio, 2)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=3000)
    parser.add_argument("--hot", type=int, default=500)
    parser.add_argument("--others", type=int, default=1000)
    parser.add_argument("--ms", type=float, default=10.0)
    parser.add_argument("--parts", default="overhead,contention",
                        help="comma list of the parts to run")
    parser.add_argument("--modes", default=",".join(MODES),
                        help="comma list of the contention modes to run")
    opts = parser.parse_args()
    parts = set(opts.parts.split(","))
    os.environ.update(ENV)
    rabbitmqctl("add_vhost", VHOST)
    rabbitmqctl("set_permissions", "-p", VHOST, "guest", ".*", ".*", ".*")
    try:
        from bench.results_io import write_result
        from config.settings import settings
        from routing.queues import declare_topology

        with _app().connection_for_write() as conn:
            declare_topology(conn, settings())
        log_dir = Path(f"/tmp/bench-distlock-{RUN}")
        figures: dict[str, Any] = {}
        if "overhead" in parts:
            figures["overhead"] = overhead(opts.pairs)
        if "contention" in parts:
            figures["contention"] = contention(opts.hot, opts.others, opts.ms, log_dir,
                                               opts.modes.split(","))
            figures["worker_logs"] = str(log_dir)
        write_result("distlock", figures)
    finally:
        subprocess.run(["rabbitmqctl", "delete_vhost", VHOST], capture_output=True, timeout=120)
        from tasks.redis_conn import get_redis

        client = get_redis()
        for key in client.scan_iter(match=f"{PREFIX}:*", count=1000):
            client.delete(key)


if __name__ == "__main__":
    main()
