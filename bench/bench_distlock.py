"""Per-user lock benchmarks, each with its baseline in the same run.

1. Overhead: one acquire + release pair on the same Redis, median and p99 in µs:
   a bare ``SET NX PX`` + Lua compare-and-delete pair (the floor), redis-py's
   own ``Lock``, and recur's lock (acquire + release, and with the per-job
   numbering done at publish time added).
2. Contention at depth: one hot user's ``--hot`` jobs at the head of the short
   queue, then ``depth`` other messages ready behind them (one job per other
   user), for each of ``--depths`` (default 0, 2,000, 5,000), on 4 worker
   processes (2 workers x concurrency 2). Every job is on the broker before any
   worker consumes (the workers start paused; the broker must show no consumer
   before publishing and every message queued before they go). Modes:
   ``recur_lock`` (the default: the releasing process runs the user's next job,
   whatever the queue depth), ``recur_lock_chain0`` (every handover through the
   broker), ``retry_on_busy`` (redis-py ``Lock`` + ``self.retry(countdown=0)``),
   and two references for the other users: ``same_load_spread`` (the same jobs,
   the hot user's spread over distinct users: the same work without the
   contention) and ``others_alone`` (the other users' jobs only).
   Reports busy re-enqueues per executed job, order inversions, the hot user's
   makespan (first start to last finish) against its serial bound (the sum of
   its job durations) and its arrival bound, the gap between one hot job's end
   and the next one's start (the handover), and the other users' jobs per
   second against both references.

Runs in its own RabbitMQ vhost and Redis key prefix, removed afterwards.

    python -m bench.bench_distlock [--pairs 3000] [--hot 500] [--depths 0,2000,5000]
                                   [--ms 10] [--parts overhead,contention] [--repeats 1]
                                   [--result distlock]
"""

from __future__ import annotations

import argparse
import itertools
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

import bench.results_io  # noqa: F401 - waits for a quiet machine, then watches the run

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
    from routing.redis_client import get_redis
    from tasks.distlock.store import LockStore, new_token

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

    def pair(lock: LockStore, user: str, seq: int) -> None:
        token = new_token()
        got = lock.acquire(user, token, 30, seq, "task-id", "{}", 300)
        assert got.status == 1
        lock.release(user, token, got.seq, "done", 30, 300, "task-id")

    def recur(user: str, seq: int) -> None:
        pair(store, user, seq)

    numbered = iter(range(10**9))

    def numbered_on_arrival(user: str, _: Any) -> None:
        pair(arrival_store, f"{user}-{next(numbered)}", 0)

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
        from tests.support.processes import spawn, wait_for, wait_for_worker

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
        self._everyone("cancel_consumer")
        # A worker answers at once and cancels in its event loop a moment later: wait
        # until the broker sees no consumer, or a worker could start on half a backlog.
        wait_for(lambda: queue_counts()[1] == 0, 60, "the workers to stop consuming")

    def go(self) -> None:
        self._everyone("add_consumer")

    def _everyone(self, command: str) -> None:
        """Send a consumer control command and wait until every worker has answered:
        a pause taking effect late would let a worker start on a half-queued backlog."""
        waiting = list(self.nodes)
        deadline = time.monotonic() + 60
        while waiting:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{command}: no answer from {waiting}")
            replies = getattr(self.app.control, command)("short", destination=waiting,
                                                         reply=True, timeout=5)
            answered = {node for reply in replies or [] for node in reply}
            waiting = [node for node in waiting if node not in answered]

    def stop(self) -> None:
        for child in self.children:
            child.stop()


def queue_counts() -> tuple[int, int]:
    """(messages ready, consumers) of the short queue, as the broker sees them."""
    with _app().connection_for_write() as conn:
        _, messages, consumers = conn.default_channel.queue_declare("short", passive=True)
    return int(messages), int(consumers)


def _app() -> Any:
    from tasks.app import app

    return app


def queue_jobs(task: Any, hot: int, others: int, ms: float,
               spread: bool = False) -> dict[str, list[str]]:
    """The hot user's jobs at the head of the queue, then ``others`` other users' single
    jobs; with ``spread`` each hot job has a user of its own instead (no contention)."""
    submitted: dict[str, list[str]] = {}
    line = [(f"spread{i}", 0) if spread else ("hot", i) for i in range(hot)]
    line += [(f"other{i}", 0) for i in range(others)]
    for user, n in line:
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


def contention_run(mode: str, hot: int, others: int, ms: float, run_dir: Path) -> dict[str, Any]:
    from bench import distlock_tasks
    from routing.redis_client import get_redis
    from tasks.distlock.runtime import runtime
    from tests.support.processes import wait_for

    client = get_redis()
    for key in (distlock_tasks.runs_key(), distlock_tasks.retries_key(),
                distlock_tasks.arrivals_key(), distlock_tasks.received_key()):
        client.delete(key)
    stats_before = runtime().store.stats()
    task_name, spread, env = MODES[mode]
    task = getattr(distlock_tasks, task_name)
    workers = Workers(run_dir, env)
    try:
        t0 = time.time()
        submitted = queue_jobs(task, hot, others, ms, spread)
        queued_s = time.time() - t0
        total = hot + others
        # Publisher confirms: every message is on the queue before the workers go.
        queued_messages = queue_counts()[0]
        go_at = time.time()
        workers.go()
        wait_for(lambda: client.llen(distlock_tasks.runs_key()) >= total, 900,
                 f"{mode}: {total} jobs to run", interval=0.2)
    finally:
        workers.stop()
    runs = [json.loads(r) for r in client.lrange(distlock_tasks.runs_key(), 0, -1)]
    arrivals, received = ({str(k): float(v) for k, v in client.hgetall(key).items()}
                          for key in (distlock_tasks.arrivals_key(),
                                      distlock_tasks.received_key()))
    stats = {k: v - stats_before.get(k, 0) for k, v in runtime().store.stats().items()}
    # The raw runs beside the worker logs, for looking into a figure afterwards.
    (run_dir / "runs.json").write_text(json.dumps(
        {"runs": runs, "arrivals": arrivals, "received": received, "go_at": go_at}))
    figures = summarize(mode, runs, submitted, stats,
                        int(client.get(distlock_tasks.retries_key()) or 0), arrivals)
    return {**figures, **worker_waits(runs, received),
            "queued_s": round(queued_s, 2), "queued_messages_at_go": queued_messages,
            # Every job was on the broker before any worker consumed: the makespans
            # measure the workers and the lock, not the publisher.
            "all_queued_before_first_start": go_at <= min(r["start"] for r in runs)}


def worker_waits(runs: list[dict[str, Any]], received: dict[str, float]) -> dict[str, Any]:
    """The other users' jobs: seconds from reaching a worker to starting (a job queued
    in a child process behind a long run waits here) and the first start to the
    last finish (their makespan)."""
    others = [r for r in runs if r["user"].startswith("other")]
    if not others:
        return {}
    waits = sorted(r["start"] - received[r["task_id"]] for r in others
                   if r["task_id"] in received)
    first = min(r["start"] for r in runs)
    return {"others_makespan_s": round(max(r["end"] for r in others) - first, 2),
            "others_wait_in_worker_ms": {
                "median": round(1000 * statistics.median(waits), 1),
                "p99": round(1000 * waits[int(len(waits) * 0.99) - 1], 1),
                "max": round(1000 * waits[-1], 1)}}


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
        "all_per_second": round(len(runs) / (max(r["end"] for r in runs) - first), 1),
    }
    if others:
        figures["others_per_second"] = round(
            len(others) / (max(r["end"] for r in others) - first), 1)
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
        gaps = sorted(b["start"] - a["end"] for a, b in itertools.pairwise(hot))
        figures.update({
            "hot_handover_gap_ms": {"median": round(1000 * statistics.median(gaps), 1),
                                    "p99": round(1000 * gaps[int(len(gaps) * 0.99) - 1], 1),
                                    "max": round(1000 * gaps[-1], 1)} if gaps else {},
            "hot_order_inversions": inversions([r["id"] for r in hot], submitted["hot"]),
            "hot_makespan_s": round(makespan, 2), "hot_serial_bound_s": round(serial, 2),
            "hot_makespan_vs_serial": round(makespan / serial, 2)})
        bound = arrival_bound(hot, submitted["hot"], arrivals)
        figures.update({"hot_arrival_bound_s": round(bound, 2),
                        "hot_makespan_vs_arrival_bound": round(makespan / bound, 2),
                        "hot_last_arrival_s": round(max(arrivals[j] for j in submitted["hot"])
                                                    - hot[0]["start"], 2)})
    return figures


#: Figures whose value in every repeat is listed beside their median.
SPREAD = ("others_per_second", "others_makespan_s", "hot_makespan_vs_serial",
          "busy_reenqueues_per_executed_job", "all_per_second")


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per figure, the median over the repeats (the worst for inversions and flags),
    with every repeat's value of the SPREAD figures."""
    out = _medians(runs)
    if name_in(runs, "hot_order_inversions"):
        out["hot_order_inversions"] = max(run["hot_order_inversions"] for run in runs)
    out["per_repeat"] = {name: [run[name] for run in runs] for name in SPREAD
                         if name_in(runs, name)}
    return out


def _medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, first in runs[0].items():
        values = [run[name] for run in runs]
        if isinstance(first, bool):
            out[name] = all(values)
        elif isinstance(first, (int, float)):
            out[name] = round(statistics.median(values), 3)
        elif isinstance(first, dict):
            out[name] = _medians(values)
    return out


def name_in(runs: list[dict[str, Any]], name: str) -> bool:
    return all(name in run for run in runs)


def contention(hot: int, depths: list[int], ms: float, log_dir: Path, modes: list[str],
               repeats: int) -> dict[str, Any]:
    """Every mode at every depth ``repeats`` times, interleaved (mode after mode, then
    again) so a load change on the shared machine hits every mode alike."""
    figures: dict[str, Any] = {
        "hot_jobs": hot, "job_ms": ms, "worker_processes": 4, "repeats": repeats,
        "goals": {"busy_reenqueues_per_executed_job": 0.1, "hot_order_inversions": 0,
                  "hot_makespan_vs_serial": 1.2, "others_per_second_vs_reference": 0.9}}
    for depth in depths:
        runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes
                                                 if depth or mode != "others_alone"}
        for i in range(repeats):
            for mode in runs:
                runs[mode].append(contention_run(
                    mode, 0 if mode == "others_alone" else hot, depth, ms,
                    log_dir / f"{depth}-{mode}-{i}"))
        at_depth = {mode: median_of(runs[mode]) for mode in runs}
        for mode in ("recur_lock", "recur_lock_chain0", "retry_on_busy"):
            if mode not in at_depth or "others_per_second" not in at_depth[mode]:
                continue
            for ref in ("same_load_spread", "others_alone"):
                if ref in at_depth and "others_per_second" in at_depth[ref]:
                    at_depth[mode][f"others_per_second_vs_{ref}"] = round(
                        at_depth[mode]["others_per_second"]
                        / at_depth[ref]["others_per_second"], 2)
        figures[f"depth_{depth}"] = at_depth
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=3000)
    parser.add_argument("--hot", type=int, default=500)
    parser.add_argument("--depths", default="0,2000,5000",
                        help="comma list of other messages ready behind the hot user's")
    parser.add_argument("--ms", type=float, default=10.0)
    parser.add_argument("--parts", default="overhead,contention",
                        help="comma list of the parts to run")
    parser.add_argument("--modes", default="recur_lock,same_load_spread,others_alone",
                        help="comma list of the contention modes to run")
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs of each contention mode (medians are reported)")
    parser.add_argument("--result", default="distlock",
                        help="name of the JSON written under bench/results/")
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
        figures: dict[str, Any] = {
            "command": " ".join(["python -m bench.bench_distlock", *sys.argv[1:]])}
        if "overhead" in parts:
            figures["overhead"] = overhead(opts.pairs)
        if "contention" in parts:
            figures["contention"] = contention(
                opts.hot, [int(d) for d in opts.depths.split(",")], opts.ms, log_dir,
                opts.modes.split(","), opts.repeats)
            figures["worker_logs"] = str(log_dir)
        write_result(opts.result, figures)
    finally:
        subprocess.run(["rabbitmqctl", "delete_vhost", VHOST], capture_output=True, timeout=120)
        from routing.redis_client import get_redis

        client = get_redis()
        for key in client.scan_iter(match=f"{PREFIX}:*", count=1000):
            client.delete(key)


if __name__ == "__main__":
    main()
