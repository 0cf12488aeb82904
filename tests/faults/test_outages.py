"""Outages of seconds cost seconds: one stop of PostgreSQL, Redis and RabbitMQ each,
kill -9 of workers and schedulers, with recur's DEFAULT settings.

Every message completes all its runs, no copy of a live job is left in a
``.dead`` queue, the last run comes within (outage + 60 s) of the last fault
(not after a 30-minute lease), and the only duplicates are runs cut by a kill
or a lost acknowledgement.
"""

from __future__ import annotations

import time
from pathlib import Path

from config.buckets_in_use import BUCKETS
from tests.support.outage_rig import OutageRig, figures, outage_rig
from tests.support.processes import wait_for

MESSAGES = 1200
EVERY = 6.0
RUNS = 6
OUTAGE = 6.0
#: RabbitMQ takes seconds to stop and start its application: down about as long.
RABBIT_DOWN = 2.0
CONCURRENCY = 3


def settle_after(rig: OutageRig, runs: int = 200) -> None:
    """Let the system show it recovered (more runs) before the next fault."""
    done = len(rig.runs())
    rig.wait_for_runs(done + runs, 60)


def test_outages_and_kills_lose_nothing_dead_letter_nothing_and_cost_seconds(
        tmp_path: Path) -> None:
    with outage_rig(tmp_path) as rig:
        for bucket in (b.name for b in BUCKETS):  # workers for every bucket
            rig.start_worker(bucket, CONCURRENCY)
        ids = rig.populate(MESSAGES, EVERY, RUNS)
        started = time.time()
        rig.start_scheduler()
        rig.start_scheduler()
        rig.wait_for_runs(MESSAGES // 2, 60)

        rig.outage("postgresql", rig.pg.stop, rig.pg.start, OUTAGE)
        settle_after(rig)
        rig.kill("worker short", rig.workers["short"])
        rig.start_worker("short", CONCURRENCY)
        rig.outage("redis", rig.redis.stop, rig.redis.start, OUTAGE)
        settle_after(rig)
        rig.kill("scheduler", rig.schedulers[0])
        rig.start_scheduler()
        rig.outage("rabbitmq", rig.rabbit.stop, rig.rabbit.start, RABBIT_DOWN)
        settle_after(rig)
        rig.kill("worker medium", rig.workers["medium"])
        rig.start_worker("medium", CONCURRENCY)
        rig.kill("scheduler", rig.schedulers[1])
        rig.start_scheduler()

        last_fault = max(f.started for f in rig.faults)
        outage = max(f.ended - f.started for f in rig.faults)  # as long as it really was
        wanted = MESSAGES * RUNS
        wait_for(lambda: len({(r.message_id, r.run) for r in rig.runs()}) >= wanted,
                 max(0.0, last_fault + outage + 60 - time.time()),
                 f"all {wanted} runs within outage + 60 s of the last fault", interval=0.5)
        wait_for(lambda: rig.rows_left() == 0, 30, "every job's row finished")
        got = figures(rig, ids, RUNS, started)
        print(f"\noutage figures: {got.as_dict()}")

        assert got.missing == 0
        assert got.dead_letters == {b.dead_queue: 0 for b in BUCKETS}
        assert got.last_fault_to_last_run <= got.longest_outage + 60
        # Only runs cut by a kill or whose acknowledgement a broker outage lost run
        # twice: at most what the killed workers and every worker had in hand.
        assert got.duplicates <= (2 + 3) * CONCURRENCY
