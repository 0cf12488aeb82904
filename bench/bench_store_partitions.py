"""The due-jobs table whole, or hash-partitioned by job key: what the store's own
statements cost on each, on the same rows.

Each layout (``--layouts``, default ``plain,hash8,plain``: the plain table
measured before and after, so drift shows) gets the same ``--rows`` jobs, their
due times spread over the past 10,000 s, so every row is due: then, through
the store's own methods (the scheduler's and the workers' statements, no
broker),

* claim: ``DueStore.dispatch`` of 1,000 due rows, ms per batch (20 batches);
* reschedule: the worker's token-checked reschedule, ms per job (5,000 jobs);
* status: ``DueStore.stats`` (what ``recur status`` reads), seconds;
* cycle: ``--cycle-threads`` threads claiming 1,000 at a time and rescheduling
  each job 10,000 s later for ``--cycle-seconds``: cycles/s while every row is
  due, what one primary sustains for claim + reschedule;
  while autovacuum runs as at its defaults (``bench/autovacuum.py`` emulates it
  when the server has it off, as this machine's has): its runs, per table or
  partition, and how long each took;
* then one ``VACUUM`` of the whole table (all its partitions), timed, and the
  dead tuples and sizes summed over the partitions.

``hashN`` is PostgreSQL's native ``PARTITION BY HASH (job_key)`` into N
partitions, with the same columns, primary key and partial indexes (created
on the partitioned table, so each partition has them). The claim's plan is
recorded (a merge of the partitions' index scans under one ``LIMIT``).

    python -m bench.bench_store_partitions [--rows 1000000] [--layouts plain,hash8,plain]
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from bench import scheduler_env as benv  # first: points the settings at the bench resources
from bench.autovacuum import Autovacuum, autovacuum_is_on
from bench.bench_store_scale import PERIOD_SECONDS, claim_batch, costs
from bench.results_io import write_result

TABLE = f"{benv.SCHEMA}.due_jobs"


def layout(name: str, indexes: list[str]) -> None:
    """Recreate an empty due_jobs as ``plain`` or ``hash<N>`` with ``indexes``."""
    benv.pg(f"CREATE TABLE {benv.SCHEMA}.due_jobs_shape (LIKE {TABLE} INCLUDING DEFAULTS)")
    benv.pg(f"DROP TABLE {TABLE}")
    partitions = int(name.removeprefix("hash")) if name.startswith("hash") else 0
    by = " PARTITION BY HASH (job_key)" if partitions else ""
    benv.pg(f"CREATE TABLE {TABLE} (LIKE {benv.SCHEMA}.due_jobs_shape INCLUDING DEFAULTS, "
            f"PRIMARY KEY (job_key)){by}")
    benv.pg(f"DROP TABLE {benv.SCHEMA}.due_jobs_shape")
    for n in range(partitions):
        benv.pg(f"CREATE TABLE {TABLE}_p{n} PARTITION OF {TABLE} "
                f"FOR VALUES WITH (MODULUS {partitions}, REMAINDER {n})")
    for ddl in indexes:
        benv.pg(ddl)


def index_ddl() -> list[str]:
    """The migrated table's secondary indexes, as statements (made once, at the start)."""
    rows = benv.pg(f"SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = "
                   f"'{TABLE}'::regclass AND NOT indisprimary")
    return [str(ddl).replace(" ONLY ", " ") for (ddl,) in rows]


def seed(rows: int) -> float:
    """``rows`` short-bucket jobs due over the past PERIOD_SECONDS; seconds taken."""
    t0 = time.monotonic()
    chunk = 1_000_000
    for first in range(0, rows, chunk):
        count = min(chunk, rows - first)
        benv.pg(benv.seed_sql(count, "short", f"now() - interval '{PERIOD_SECONDS} seconds' + "
                              f"((i % {chunk}) * interval '{PERIOD_SECONDS / chunk * 1e6:.0f} "
                              "microseconds')", start=first))
    benv.pg(f"ANALYZE {TABLE}")
    return time.monotonic() - t0


def tree_stats() -> dict[str, Any]:
    """Dead and live tuples, autovacuum runs and sizes summed over the partitions."""
    live, dead, autovacuums, total, table = benv.pg(
        "SELECT sum(s.n_live_tup), sum(s.n_dead_tup), sum(s.autovacuum_count), "
        "sum(pg_total_relation_size(t.relid)), sum(pg_relation_size(t.relid)) "
        f"FROM (SELECT relid FROM pg_partition_tree('{TABLE}') UNION "
        f"SELECT '{TABLE}'::regclass) t LEFT JOIN pg_stat_user_tables s "
        "ON s.relid = t.relid")[0]
    return {"live_tuples": int(live or 0), "dead_tuples": int(dead or 0),
            "autovacuum_runs": int(autovacuums or 0), "total_mb": round(int(total) / 2**20),
            "table_mb": round(int(table) / 2**20)}


def claim_plan() -> list[str]:
    """The claim's plan nodes (EXPLAIN of the scheduler's statement shape)."""
    rows = benv.pg(f"EXPLAIN (COSTS OFF) SELECT job_key FROM {TABLE} WHERE bucket = 'short' "
                   "AND state = 0 AND due_at <= now() ORDER BY due_at LIMIT 1000 "
                   "FOR UPDATE SKIP LOCKED")
    return [str(line) for (line,) in rows]


def cycle(store: Any, seconds: float, threads: int) -> dict[str, Any]:
    """Claim + reschedule as fast as ``threads`` go, every row due; cycles/s."""
    done = [0] * threads
    stop = threading.Event()

    def worker(n: int) -> None:
        while not stop.is_set():
            now = datetime.now(UTC)
            for job in claim_batch(store, now):
                store.reschedule(job.job_key, job.token,
                                 datetime.now(UTC) + timedelta(seconds=PERIOD_SECONDS), now)
                done[n] += 1

    runners = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    t0 = time.monotonic()
    for runner in runners:
        runner.start()
    time.sleep(seconds)
    stop.set()
    for runner in runners:
        runner.join()
    return {"seconds": round(time.monotonic() - t0), "threads": threads,
            "cycles_per_s": round(sum(done) / (time.monotonic() - t0))}


def measure(store: Any, name: str, rows: int, indexes: list[str], args: Any) -> dict[str, Any]:
    layout(name, indexes)
    seeded = seed(rows)
    step: dict[str, Any] = {"layout": name, "rows": rows, "seed_seconds": round(seeded, 1),
                            "claim_plan": claim_plan(), **costs(store)}
    emulated = None if autovacuum_is_on() else Autovacuum(TABLE)
    if emulated is not None:
        emulated.start()
    step["cycle"] = cycle(store, args.cycle_seconds, args.cycle_threads)
    step["autovacuum"] = "server" if emulated is None else {
        "emulated": True, "runs": emulated.stop()}
    step["before_vacuum"] = tree_stats()
    t0 = time.monotonic()
    benv.pg(f"VACUUM {TABLE}")
    step["vacuum_seconds"] = round(time.monotonic() - t0, 1)
    time.sleep(2.0)  # the statistics views are flushed about once a second
    step["after_vacuum"] = tree_stats()
    step["load_avg"] = [round(x, 2) for x in os.getloadavg()]
    print({k: v for k, v in step.items() if k != "claim_plan"}, flush=True)
    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--layouts", default="plain,hash8,plain")
    parser.add_argument("--cycle-seconds", type=float, default=120)
    parser.add_argument("--cycle-threads", type=int, default=4)
    args = parser.parse_args()
    from scheduler.store import DueStore, close_stores

    benv.setup()
    steps = []
    try:
        indexes = index_ddl()
        for name in args.layouts.split(","):
            store = DueStore.open(benv.PG_URL)
            steps.append(measure(store, name, args.rows, indexes, args))
            store.close()
            close_stores()
    finally:
        benv.teardown()
    write_result("store_partitions", {
        "command": f"python -m bench.bench_store_partitions --rows {args.rows} "
                   f"--layouts {args.layouts} --cycle-seconds {args.cycle_seconds:g} "
                   f"--cycle-threads {args.cycle_threads}",
        "steps": steps})


if __name__ == "__main__":
    main()
