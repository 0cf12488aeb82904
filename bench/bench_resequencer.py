"""Resequencer: latency from arrival to send when processing is slower than arrivals.

The issue's scenario scaled x0.1: each message takes 75 ms to process (the short
bucket's simulated work x RECUR_WORK_SCALE=1.5), one arrives every 25 ms, all for
one destination, sent by HTTP POST to a local receiver. Two runs, same code and
same services, side by side:

* baseline: one worker process, so messages are processed one at a time and the
  latency grows with every arrival (75 ms of work per 25 ms of arrivals);
* ours: 8 worker processes processing in parallel, the resequencer restoring
  arrival order before the send;
* kills: ours with three outbound workers, two of which are killed (``kill -9``)
  while they hold the destination's sender lease, at a third and at two thirds
  of the run: the latency the take-overs add (goal: p99 <= 6 s).

Figures per run: p50/p99 latency (arrival -> received), p99 of the first and of
the last quarter (steady or growing), throughput, order violations, missing and
repeated sequence numbers, and the latency's growth per arrival (latency of a
sequence number received twice: its first arrival). Each run first sends 24
unmeasured messages through every hop (to another destination).

    python -m bench.bench_resequencer [--messages 2000] [--baseline-messages 600]
                                      [--cases baseline,ours,kills]
"""

from __future__ import annotations

import argparse
import itertools
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import bench.results_io  # noqa: F401 - waits for a quiet machine, then watches the run

RUN = uuid.uuid4().hex[:8]
VHOST = f"recur-bench-{RUN}"
ROOT = Path(__file__).resolve().parents[1]
PROCESSING_SECONDS = 0.075
ARRIVAL_SECONDS = 0.025
#: Messages sent through the pipeline before each measured run (not measured).
WARMUP_MESSAGES = 24


def bench_environment() -> dict[str, str]:
    """Our own vhost and key prefix, so the benchmark touches nobody else's state."""
    return {"RECUR_BROKER_URL": f"amqp://guest:guest@127.0.0.1:5672/{VHOST}",
            "RECUR_KEY_PREFIX": VHOST, "RECUR_WORK_SCALE": str(PROCESSING_SECONDS / 0.05),
            "RECUR_LOG_LEVEL": "WARNING", "RECUR_RESEQ_GAP_TIMEOUT": "60"}


def rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", *args], check=True, capture_output=True, timeout=120)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def first_receptions(received: list[Any]) -> list[Any]:
    """Each sequence number's first reception (a re-send after a kill is a repeat)."""
    seen: set[int] = set()
    return [r for r in received if not (r.seq in seen or seen.add(r.seq))]


def summarize(received: list[Any], count: int, elapsed: float) -> dict[str, Any]:
    """Latency, throughput and order figures of one run, in milliseconds."""
    seqs = [r.seq for r in received]
    latency = [(r.at - r.body["arrived_at"]) * 1000 for r in first_receptions(received)]
    quarter, tenth = max(1, len(latency) // 4), max(1, len(latency) // 10)
    return {
        "messages": count,
        "p50_ms": round(statistics.median(latency), 1),
        "p99_ms": round(percentile(latency, 0.99), 1),
        "max_ms": round(max(latency), 1),
        "first_quarter_p99_ms": round(percentile(latency[:quarter], 0.99), 1),
        "last_quarter_p99_ms": round(percentile(latency[-quarter:], 0.99), 1),
        "p99_ms_by_tenth": [round(percentile(latency[i * tenth:(i + 1) * tenth], 0.99), 1)
                            for i in range(10)],
        # Latency growth per arrival (least squares): ~0 when steady, ~50 ms sequentially.
        "latency_slope_ms_per_message": round(
            statistics.linear_regression(range(len(latency)), latency).slope, 2),
        "throughput_per_s": round(len(received) / elapsed, 1),
        # A re-send of the number just before (after a kill) is a repeat, not disorder.
        "order_violations": sum(b < a for a, b in itertools.pairwise(seqs)),
        "missing": len(set(range(1, count + 1)) - set(seqs)),
        "repeated": len(seqs) - len(set(seqs)),
    }


def warm_up(cfg: Any, name: str, receiver: Any, count: int) -> None:
    """Send a few messages through every hop first (connections, pools, first imports
    in each process), as a running system would have; not measured."""
    from routing.reseq.intake import submit
    from tests.support.processes import wait_for

    before = len(receiver.seqs("warmup"))
    for i in range(count):
        submit(f"warmup-{name}", {"id": f"warm-{i}", "user_id": "u", "bucket": "short",
                                  "payload": None}, cfg)
    wait_for(lambda: len(receiver.seqs("warmup")) >= before + count, 60, "the warm-up")


class SenderKiller:
    """Kills (``kill -9``) the outbound worker holding the destination's sender lease,
    ``kills`` times, spread over the run; the other outbound workers take over."""

    def __init__(self, name: str, cfg: Any, senders: list[Any], count: int, kills: int) -> None:
        from routing.redis_client import get_redis
        from routing.reseq.state import Resequencer

        self.name, self.senders = name, {child.pid: child for child in senders}
        self.reseq = Resequencer(get_redis(), cfg)
        self.due = [count * (k + 1) // (kills + 1) for k in range(kills)]
        self.killed_at: list[float] = []

    def maybe_kill(self, arrival: int) -> None:
        """At or after the next due arrival, kill the lease holder (once one holds it)."""
        from routing.reseq.lease import holder_pid

        if not self.due or arrival < self.due[0]:
            return
        token = self.reseq.holder(self.name)
        child = self.senders.pop(holder_pid(token), None) if token else None
        if child is not None:
            child.kill9()
            self.killed_at.append(time.time())
            self.due.pop(0)


def run(name: str, processes: int, count: int, log_dir: Path, senders: int = 1,
        kills: int = 0) -> dict[str, Any]:
    """Start the workers, submit ``count`` messages at the arrival rate, measure."""
    from routing.reseq.intake import submit
    from tasks.app import app
    from tests.support.processes import spawn, wait_for, wait_for_worker
    from tests.support.receiver import Receiver

    with Receiver() as receiver:
        env = {**os.environ, "RECUR_DESTINATIONS": f"{name}:{receiver.url(name)},"
                                                  f"warmup-{name}:{receiver.url('warmup')}"}
        celery = str(Path(sys.executable).parent / "celery")
        children = []
        try:
            workers = [("short", ["-c", str(processes), "--prefetch-multiplier", "1"])]
            workers += [("outbound", ["-P", "threads", "-c", "4"])] * senders
            for n, (queue, argv) in enumerate(workers):
                node = f"{name}-{queue}-{n}-{RUN}@{socket.gethostname()}"
                child = spawn(f"{name}-{queue}-{n}", [celery, "-A", "tasks", "worker", "-Q", queue,
                                                  "-n", node, "-l", "WARNING",
                                                  "--without-mingle", "--without-gossip",
                                                  *argv], log_dir, env, cwd=ROOT)
                children.append(child)
                wait_for_worker(app, child, node)
            from config.settings import load_settings

            cfg = load_settings(env)
            warm_up(cfg, name, receiver, WARMUP_MESSAGES)
            killer = SenderKiller(name, cfg, children[1:], count, kills)
            start = time.monotonic()
            for i in range(count):  # one arrival every 25 ms, on an absolute schedule
                time.sleep(max(0.0, start + i * ARRIVAL_SECONDS - time.monotonic()))
                killer.maybe_kill(i)
                submit(name, {"id": f"{name}-{i}", "user_id": "u", "bucket": "short",
                              "payload": {"i": i}}, cfg)
            wait_for(lambda: len(set(receiver.seqs(name))) >= count,
                     count * PROCESSING_SECONDS / processes + 120, f"{count} sends")
            elapsed = max(r.at for r in receiver.of(name)) - min(
                r.body["arrived_at"] for r in receiver.of(name))
            figures = summarize(receiver.of(name), count, elapsed)
            if kills:
                figures.update(kill_figures(receiver.of(name), killer.killed_at, start),
                               fenced=len(receiver.fenced))
        finally:
            for child in children:
                child.stop()
    return {"processes": processes, "outbound_workers": senders, **figures}


def kill_figures(received: list[Any], killed_at: list[float], start: float) -> dict[str, Any]:
    """When the senders were killed (s into the run) and how long each destination
    went without a new sequence number afterwards."""
    firsts = [r.at for r in first_receptions(received)]
    wall_start = time.time() - (time.monotonic() - start)
    return {"sender_kills": len(killed_at),
            "killed_at_s": [round(t - wall_start, 1) for t in killed_at],
            "silent_after_kill_s": [round(min((a for a in firsts if a > t), default=t) - t, 2)
                                    for t in killed_at]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--baseline-messages", type=int, default=600,
                        help="the baseline's backlog grows by 2 messages per arrival: "
                             "2000 would take 150 s")
    parser.add_argument("--cases", default="baseline,ours,kills",
                        help="comma-separated: baseline, ours, kills")
    opts = parser.parse_args()
    cases = set(opts.cases.split(","))
    os.environ.update(bench_environment())
    rabbitmqctl("add_vhost", VHOST)
    rabbitmqctl("set_permissions", "-p", VHOST, "guest", ".*", ".*", ".*")
    try:
        from config.settings import settings
        from routing.queues import declare_topology
        from tasks.app import app

        with app.connection_for_write() as conn:
            declare_topology(conn, settings())
        runs: dict[str, dict[str, Any]] = {}
        with tempfile.TemporaryDirectory(prefix="bench-reseq-") as logs:
            if "baseline" in cases:
                runs["baseline_sequential"] = run("baseline", 1, opts.baseline_messages,
                                                  Path(logs))
            if "ours" in cases:
                runs["ours_parallel_resequenced"] = run("ours", 8, opts.messages, Path(logs))
            if "kills" in cases:
                runs["ours_two_sender_kills"] = run("kills", 8, opts.messages, Path(logs),
                                                    senders=3, kills=2)
    finally:
        rabbitmqctl("delete_vhost", VHOST)
        delete_keys()
    from bench.results_io import write_result

    ours = runs.get("ours_parallel_resequenced")
    write_result("bench_resequencer", {
        "command": f"python -m bench.bench_resequencer --messages {opts.messages} "
                   f"--baseline-messages {opts.baseline_messages} --cases {opts.cases}",
        "processing_ms": PROCESSING_SECONDS * 1000, "arrival_every_ms": ARRIVAL_SECONDS * 1000,
        "goal": "ours: p99 <= 3 x processing (225 ms), steady; 0 order violations; "
                "through two sender kills: p99 <= 6 s",
        **runs,
        "ours_p99_over_processing": ours and round(ours["p99_ms"] / (PROCESSING_SECONDS * 1000),
                                                   2),
    })


def delete_keys() -> None:
    from routing.redis_client import get_redis

    client = get_redis()
    for key in client.scan_iter(match=f"{VHOST}:*", count=1000):
        client.delete(key)


if __name__ == "__main__":
    main()
