"""The due-jobs store as the population grows: what each operation costs, and bloat.

The population grows in steps (``--sizes``, default 1M then 10M waiting jobs).
Every 1M rows spread their due times over 10,000 s (100 rows/s each), the first
5 minutes of them already due, so each step holds due work for the claims and
a steady stream of newly due rows: at 10M, 1,000 rows/s fall due, a 10M-row
population going round every ~2.8 hours. At each step, through the store's own
methods (the scheduler's and the workers' statements; no broker):

* claim: ``DueStore.dispatch`` of 1,000 due rows (claim, publish to nowhere,
  mark dispatched), ms per batch;
* reschedule: the worker's token-checked reschedule of one job, ms per job
  (one thread, so one round trip each);
* status: ``DueStore.stats`` (what ``recur status`` reads), seconds;
* drain (first): the scheduler's own dispatch (its lanes, batches and
  publisher confirms) of 10,000 due rows into RabbitMQ, rows/s;
* storage: table and index bytes, per job.

Then, at the largest size, the recurring cycle for ``--cycle-seconds``:
``--cycle-threads`` threads each claim the due rows 1,000 at a time and
reschedule every one 10,000 s later (as workers would), with autovacuum at
its defaults: cycles/s reached, the oldest due row's lag at the end, dead
tuples, autovacuum runs, table and index size before and after; then one
plain ``VACUUM`` of the table (the work autovacuum has ahead of it), timed,
and the sizes after it.

Runs in its own PostgreSQL schema (and vhost), removed afterwards.

    python -m bench.bench_store_scale [--sizes 1000000,10000000] [--cycle-seconds 300]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from bench import scheduler_env as benv  # first: points the settings at the bench resources
from bench.results_io import write_result

CHUNK = 1_000_000
#: Seconds one 1M chunk's due times spread over; a rescheduled job comes back this late.
PERIOD_SECONDS = 10_000
BATCH = 1000


def seed(start: int, size: int) -> float:
    """Add jobs ``start+1..size`` in 1M chunks; seconds taken."""
    t0 = time.monotonic()
    for first in range(start, size, CHUNK):
        count = min(CHUNK, size - first)
        benv.pg(benv.seed_sql(count, "short", "now() - interval '5 minutes' + "
                              f"((i % {CHUNK}) * interval '{PERIOD_SECONDS / CHUNK * 1e6:.0f} "
                              "microseconds')", start=first))
    benv.pg(f"VACUUM ANALYZE {benv.SCHEMA}.due_jobs")
    return time.monotonic() - t0


def storage() -> dict[str, Any]:
    from bench.bench_scheduler_scale import storage as measured

    return measured()


def table_stats() -> dict[str, Any]:
    live, dead, autovacuums, last = benv.pg(
        "SELECT n_live_tup, n_dead_tup, autovacuum_count, last_autovacuum "
        f"FROM pg_stat_user_tables WHERE relid = '{benv.SCHEMA}.due_jobs'::regclass")[0]
    return {"live_tuples": live, "dead_tuples": dead, "autovacuum_runs": autovacuums,
            "last_autovacuum": str(last)}


def claim_batch(store: Any, now: datetime) -> list[Any]:
    claimed: list[Any] = []
    store.dispatch("short", BATCH, now, now + timedelta(hours=1), claimed.extend)
    return claimed


def costs(store: Any) -> dict[str, Any]:
    """Claim, reschedule and status cost at the current size."""
    claims, claimed = [], []
    for _ in range(20):
        t0 = time.perf_counter()
        got = claim_batch(store, datetime.now(UTC))
        claims.append((time.perf_counter() - t0) * 1000)
        claimed += got
    reschedules = []
    for job in claimed[:5000]:
        now = datetime.now(UTC)
        t0 = time.perf_counter()
        assert store.reschedule(job.job_key, job.token, now + timedelta(seconds=PERIOD_SECONDS),
                                now)
        reschedules.append((time.perf_counter() - t0) * 1000)
    t0 = time.perf_counter()
    store.stats(datetime.now(UTC))
    status = time.perf_counter() - t0
    return cost_figures(claims, claimed, reschedules, status)


def drain_rate(store: Any, rows: int = 10_000) -> int:
    """The scheduler's dispatch of ``rows`` due rows into the bench vhost's queue."""
    from bench.bench_scheduler import purge
    from config.buckets import BUCKETS_BY_NAME
    from config.settings import settings
    from routing.queues import TASK_EXCHANGE
    from scheduler.drain import Scheduler
    from scheduler.publisher import ConfirmingPublisher

    publisher = ConfirmingPublisher(benv.BROKER_URL, TASK_EXCHANGE.name)
    publisher.connect()
    scheduler = Scheduler(store, publisher, settings())
    t0 = time.perf_counter()
    total = scheduler.dispatch(BUCKETS_BY_NAME["short"], rows, datetime.now(UTC), early=False)
    seconds = time.perf_counter() - t0
    scheduler.close_publishers()
    purge()
    return round(total / seconds)


def cost_figures(claims: list[float], claimed: list[Any], reschedules: list[float],
                 status: float) -> dict[str, Any]:
    return {"claim_ms_per_1000": round(statistics.median(claims), 1),
            "claim_ms_per_1000_max": round(max(claims), 1),
            "claimed_rows": len(claimed),
            "reschedule_ms_per_job": round(statistics.median(reschedules), 2),
            "reschedule_ms_p99": round(sorted(reschedules)[int(len(reschedules) * .99)], 2),
            "status_seconds": round(status, 2)}


def cycle(store: Any, seconds: float, threads: int) -> dict[str, Any]:
    """Jobs going round (claim, reschedule one period later) for ``seconds``."""
    done = [0] * threads
    stop = threading.Event()

    def worker(n: int) -> None:
        while not stop.is_set():
            now = datetime.now(UTC)
            got = claim_batch(store, now)
            if not got:
                stop.wait(0.2)
            for job in got:
                store.reschedule(job.job_key, job.token,
                                 datetime.now(UTC) + timedelta(seconds=PERIOD_SECONDS), now)
            done[n] += len(got)

    before = {"storage": storage(), **table_stats()}
    runners = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    t0 = time.monotonic()
    for runner in runners:
        runner.start()
    samples = []
    while time.monotonic() - t0 < seconds:
        time.sleep(min(30.0, max(0.1, seconds - (time.monotonic() - t0))))
        samples.append({"at_s": round(time.monotonic() - t0), "cycles": sum(done),
                        **table_stats()})
    stop.set()
    for runner in runners:
        runner.join()
    elapsed = time.monotonic() - t0
    stats = store.stats(datetime.now(UTC))["short"]
    lag = (datetime.now(UTC) - stats.oldest_due_at).total_seconds() \
        if stats.oldest_due_at else 0.0
    after = {"storage": storage(), **table_stats()}
    t0 = time.monotonic()
    benv.pg(f"VACUUM {benv.SCHEMA}.due_jobs")  # what autovacuum will have to do
    vacuum_seconds = time.monotonic() - t0
    return {"seconds": round(elapsed), "threads": threads, "cycles": sum(done),
            "cycles_per_s": round(sum(done) / elapsed), "due_now_at_end": stats.due,
            "oldest_due_lag_s_at_end": round(lag), "before": before, "samples": samples,
            "after": after, "vacuum_seconds": round(vacuum_seconds, 1),
            "after_vacuum": {"storage": storage(), **table_stats()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--cycle-seconds", type=float, default=300)
    parser.add_argument("--cycle-threads", type=int, default=4)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    from scheduler.store import DueStore

    benv.setup()
    steps, loaded = [], 0
    try:
        store = DueStore.open(benv.PG_URL)
        for size in sizes:
            seeded = seed(loaded, size)
            loaded = size
            drain = drain_rate(store)
            steps.append({"waiting_jobs": size, "seed_seconds": round(seeded, 1),
                          "drain_rows_per_s": drain, **costs(store), "storage": storage()})
            print(steps[-1], flush=True)
        cycled = cycle(store, args.cycle_seconds, args.cycle_threads) \
            if args.cycle_seconds else None
        store.close()
    finally:
        benv.teardown()
    write_result("store_scale", {
        "command": f"python -m bench.bench_store_scale --sizes {args.sizes} "
                   f"--cycle-seconds {args.cycle_seconds:g} --cycle-threads {args.cycle_threads}",
        "due_spread": f"each 1M rows due over {PERIOD_SECONDS} s; rescheduled "
                      f"{PERIOD_SECONDS} s later",
        "steps": steps, "cycle_at_largest": cycled})


if __name__ == "__main__":
    main()
