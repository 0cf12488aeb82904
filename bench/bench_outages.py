"""Outages of every service with recur's default settings: what they cost.

Runs the scenario of tests/faults/test_outages.py twice on private PostgreSQL,
Redis and RabbitMQ servers, with workers for every bucket and two schedulers:
once without faults (the baseline) and once with one stop of each service
plus kill -9 of workers and schedulers. Reports wall time, runs/s of each,
duplicates, dead letters and the time from the last fault to the last run.

    flock /tmp/recur-bench.lock python -m bench.bench_outages [--messages 3000 --runs 6]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.results_io import write_result
from config.buckets_in_use import BUCKETS
from tests.support.outage_rig import OutageRig, figures, outage_rig
from tests.support.processes import wait_for

OUTAGE = 6.0
#: RabbitMQ takes seconds to stop and start its application: down about as long.
RABBIT_DOWN = 2.0
CONCURRENCY = 3


def start(rig: OutageRig, count: int, every: float, runs: int) -> tuple[list[str], float]:
    for bucket in (b.name for b in BUCKETS):  # workers for every bucket
        rig.start_worker(bucket, CONCURRENCY)
    ids = rig.populate(count, every, runs)
    started = time.time()
    rig.start_scheduler()
    rig.start_scheduler()
    return ids, started


def faults(rig: OutageRig, step: int) -> None:
    """The test's faults, each after ``step`` more runs."""
    def after() -> None:
        rig.wait_for_runs(len(rig.runs()) + step, 300)

    after()
    rig.outage("postgresql", rig.pg.stop, rig.pg.start, OUTAGE)
    after()
    rig.kill("worker short", rig.workers["short"])
    rig.start_worker("short", CONCURRENCY)
    rig.outage("redis", rig.redis.stop, rig.redis.start, OUTAGE)
    after()
    rig.kill("scheduler", rig.schedulers[0])
    rig.start_scheduler()
    rig.outage("rabbitmq", rig.rabbit.stop, rig.rabbit.start, RABBIT_DOWN)
    after()
    rig.kill("worker medium", rig.workers["medium"])
    rig.start_worker("medium", CONCURRENCY)
    rig.kill("scheduler", rig.schedulers[1])
    rig.start_scheduler()


def scenario(count: int, every: float, runs: int, with_faults: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="recur-bench-outages-") as tmp, \
            outage_rig(Path(tmp)) as rig:
        ids, started = start(rig, count, every, runs)
        if with_faults:
            faults(rig, count // 3)
        wanted = count * runs
        wait_for(lambda: len({(r.message_id, r.run) for r in rig.runs()}) >= wanted, 600,
                 f"all {wanted} runs", interval=0.5)
        wait_for(lambda: rig.rows_left() == 0, 60, "every job's row finished")
        return figures(rig, ids, runs, started).as_dict()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--every", type=float, default=6.0)
    parser.add_argument("--runs", type=int, default=6)
    opts = parser.parse_args()
    baseline = scenario(opts.messages, opts.every, opts.runs, with_faults=False)
    faulted = scenario(opts.messages, opts.every, opts.runs, with_faults=True)
    write_result("outages", {
        "settings": "recur defaults; only the service URLs are set",
        "messages": opts.messages, "every": opts.every, "runs_each": opts.runs,
        "workers": f"one per bucket, concurrency {CONCURRENCY}", "schedulers": 2,
        "without_faults": baseline, "with_faults": faulted,
        "runs_per_second_ratio": round(faulted["runs_per_second"]
                                       / baseline["runs_per_second"], 3)})


if __name__ == "__main__":
    main()
