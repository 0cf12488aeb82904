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

Then, at ``--cycle-at`` (default the largest size), the recurring cycle for
``--cycle-seconds``: ``--cycle-threads`` threads each claim the due rows 1,000
at a time and reschedule every one 10,000 s later (as workers would), with
autovacuum at its defaults (emulated by ``bench/autovacuum.py`` when the
server has it off, as this machine's shared one has; ``bench/private_postgres.py``
runs the benchmark on a private server with it on). Every ``--sample-seconds`` it
records cycles/s, the oldest due row's lag, live and dead tuples, autovacuum and
autoanalyze runs (and whether a vacuum is running now, with its progress), table
and index sizes, the machine's busy share and load average; every vacuum of the
table is timed (each second, from ``pg_stat_progress_vacuum``); at the end one
plain ``VACUUM`` of the table (the work autovacuum still has ahead of it), timed,
and the sizes after it. The result records the server's vacuum settings. Sizes
above ``--cycle-at`` are seeded and measured after the cycle (static figures
only). From ``--bulk-from`` on, a step is seeded with the secondary indexes
dropped and rebuilt after (a sorted bulk load's packed indexes, and minutes
instead of tens of minutes on two cores); the step records that it was.

The result is written after every step, so a run cut short keeps what it
measured. Runs in its own PostgreSQL schema (and vhost), removed afterwards.

    python -m bench.bench_store_scale [--sizes 1000000,10000000] [--cycle-seconds 300]
    # the 30-minute soak at 10M, then 30M static figures:
    python -m bench.bench_store_scale --sizes 1000000,10000000,30000000 \
        --cycle-at 10000000 --cycle-seconds 1800 --sample-seconds 60 \
        --bulk-from 30000000 --result store_scale_soak
    # the same soak with the server's own autovacuum (a private PostgreSQL):
    python -m bench.private_postgres --log /tmp/pg.log -- python -m bench.bench_store_scale \
        --sizes 10000000 --cycle-seconds 1800 --sample-seconds 60 --bulk-from 10000000 \
        --result store_scale_soak_autovacuum
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
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


def secondary_indexes() -> list[tuple[str, str]]:
    """(name, CREATE INDEX statement) of every index of due_jobs but the primary key."""
    rows = benv.pg(f"SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid) "
                   f"FROM pg_index i WHERE i.indrelid = '{benv.SCHEMA}.due_jobs'::regclass "
                   f"AND NOT i.indisprimary")
    return [(str(name), str(ddl)) for name, ddl in rows]


def seed(start: int, size: int, bulk: bool = False) -> float:
    """Add jobs ``start+1..size`` in 1M chunks; seconds taken. ``bulk``: with the
    secondary indexes dropped during the load and built again after it."""
    t0 = time.monotonic()
    rebuild = secondary_indexes() if bulk else []
    for name, _ in rebuild:
        benv.pg(f"DROP INDEX {name}")
    for first in range(start, size, CHUNK):
        count = min(CHUNK, size - first)
        benv.pg(benv.seed_sql(count, "short", "now() - interval '5 minutes' + "
                              f"((i % {CHUNK}) * interval '{PERIOD_SECONDS / CHUNK * 1e6:.0f} "
                              "microseconds')", start=first))
    for _, ddl in rebuild:
        benv.pg(ddl)
    benv.pg(f"VACUUM ANALYZE {benv.SCHEMA}.due_jobs")
    return time.monotonic() - t0


def storage() -> dict[str, Any]:
    from bench.bench_scheduler_scale import storage as measured

    return measured()


def sizes() -> dict[str, Any]:
    """Table and index bytes without counting rows (cheap enough to sample each minute)."""
    total, table = benv.pg(f"SELECT pg_total_relation_size('{benv.SCHEMA}.due_jobs'), "
                           f"pg_relation_size('{benv.SCHEMA}.due_jobs')")[0]
    indexes = benv.pg(
        f"SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) FROM pg_index "
        f"WHERE indrelid = '{benv.SCHEMA}.due_jobs'::regclass")
    return {"total_mb": round(int(total) / 2**20), "table_mb": round(int(table) / 2**20),
            "indexes_mb": {str(name).rsplit(".", 1)[-1]: round(int(size) / 2**20)
                           for name, size in indexes}}


def vacuum_now() -> dict[str, Any] | None:
    """The (auto)vacuum running on due_jobs now, with its progress; None if none."""
    rows = benv.pg(
        "SELECT p.phase, p.heap_blks_total, p.heap_blks_scanned, p.index_vacuum_count, "
        "a.query LIKE 'autovacuum:%' FROM pg_stat_progress_vacuum p "
        "JOIN pg_stat_activity a USING (pid) "
        f"WHERE p.relid = '{benv.SCHEMA}.due_jobs'::regclass")
    if not rows:
        return None
    phase, total, scanned, index_passes, auto = rows[0]
    return {"phase": phase, "heap_scanned_share": round(int(scanned) / max(int(total), 1), 2),
            "index_passes": index_passes, "autovacuum": bool(auto)}


def head_lag() -> dict[str, Any]:
    """The oldest scheduled row's lag and the rows due now (two reads of the drain index)."""
    oldest, due = benv.pg(
        f"SELECT extract(epoch FROM now() - min(due_at)), count(*) FILTER (WHERE due_at <= now()) "
        f"FROM (SELECT due_at FROM {benv.SCHEMA}.due_jobs WHERE bucket = 'short' AND state = 0 "
        f"ORDER BY due_at LIMIT 100000) AS head")[0]
    return {"oldest_due_lag_s": round(max(0.0, float(oldest or 0)), 1), "due_now": due}


def table_stats() -> dict[str, Any]:
    live, dead, autovacuums, last, analyzes, reltuples = benv.pg(
        "SELECT s.n_live_tup, s.n_dead_tup, s.autovacuum_count, s.last_autovacuum, "
        "s.autoanalyze_count, c.reltuples FROM pg_stat_user_tables s "
        f"JOIN pg_class c ON c.oid = s.relid WHERE s.relid = '{benv.SCHEMA}.due_jobs'::regclass")[0]
    return {"live_tuples": live, "dead_tuples": dead, "autovacuum_runs": autovacuums,
            "last_autovacuum": str(last), "autoanalyze_runs": analyzes,
            "reltuples": round(float(reltuples))}


#: The settings that decide when and how fast (auto)vacuum runs, recorded with the result.
SERVER_SETTINGS = ["server_version", "port", "autovacuum", "autovacuum_naptime",
                   "autovacuum_vacuum_threshold", "autovacuum_vacuum_scale_factor",
                   "autovacuum_vacuum_cost_delay", "autovacuum_vacuum_cost_limit",
                   "vacuum_cost_limit", "autovacuum_max_workers", "autovacuum_work_mem",
                   "maintenance_work_mem", "shared_buffers", "fsync", "synchronous_commit",
                   "max_wal_size", "log_autovacuum_min_duration"]


def server() -> dict[str, str]:
    """The PostgreSQL server the store runs on: its version, port and vacuum settings."""
    names = ", ".join(f"'{name}'" for name in SERVER_SETTINGS)
    rows = benv.pg(f"SELECT name, current_setting(name) FROM pg_settings WHERE name IN ({names})")
    return {str(name): str(value) for name, value in sorted(rows)}


class VacuumWatch(threading.Thread):
    """Every vacuum of due_jobs (autovacuum's or not), looked for every ``every``
    seconds in ``pg_stat_progress_vacuum``: when it started (seconds after this
    thread did), how long it ran (to within ``every``), the table's dead tuples when it
    began and when it was gone, the phases seen and its index passes."""

    def __init__(self, every: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.every, self.table = every, f"{benv.SCHEMA}.due_jobs"
        self.stopping = threading.Event()
        self.t0 = datetime.now(UTC)
        self.running: dict[tuple[int, datetime], dict[str, Any]] = {}
        self.runs: list[dict[str, Any]] = []

    def run(self) -> None:
        import psycopg

        from bench.private_env import PG_DSN

        self.t0 = datetime.now(UTC)
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            while not self.stopping.wait(self.every):
                self.look(conn)

    def look(self, conn: Any) -> None:
        dead, runs = conn.execute(
            "SELECT n_dead_tup, autovacuum_count FROM pg_stat_user_tables "
            "WHERE relid = %s::regclass", (self.table,)).fetchone()
        rows = conn.execute(
            "SELECT a.pid, a.query_start, a.backend_type = 'autovacuum worker', p.phase, "
            "p.heap_blks_total, p.index_vacuum_count FROM pg_stat_progress_vacuum p "
            "JOIN pg_stat_activity a USING (pid) WHERE p.relid = %s::regclass",
            (self.table,)).fetchall()
        seen = set()
        for pid, started, auto, phase, heap_blocks, index_passes in rows:
            seen.add((pid, started))
            run = self.running.setdefault((pid, started), {
                "autovacuum": bool(auto), "at_s": round((started - self.t0).total_seconds()),
                "dead_tuples_before": dead, "heap_blocks": heap_blocks, "phases": []})
            if phase not in run["phases"]:
                run["phases"].append(phase)
            run["index_passes"] = index_passes
        for key in [key for key in self.running if key not in seen]:
            run = self.running.pop(key)
            run["seconds"] = round((datetime.now(UTC) - key[1]).total_seconds())
            run["dead_tuples_after"], run["autovacuum_runs_so_far"] = dead, runs
            self.runs.append(run)

    def stop(self) -> list[dict[str, Any]]:
        """The vacuums seen, those still running last (``"running": True``)."""
        self.stopping.set()
        self.join()
        return self.runs + [{**run, "running": True} for run in self.running.values()]


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
    from config.buckets_in_use import BUCKETS_BY_NAME
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


def sample(t0: float, cycles: int, last: dict[str, Any]) -> dict[str, Any]:
    """One soak sample; ``last`` is the previous one (cycles and CPU since then)."""
    from bench.proc_stats import machine_busy_seconds

    busy, total = machine_busy_seconds()
    at = time.monotonic() - t0
    rate = (cycles - last["cycles"]) / max(at - last["at_s"], 1e-9)
    share = (busy - last["busy"]) / max(total - last["total"], 1e-9)
    return {"at_s": round(at), "cycles": cycles, "cycles_per_s": round(rate),
            "machine_busy_share": round(share, 2), "load_avg_1m": os.getloadavg()[0],
            **head_lag(), **table_stats(), "sizes": sizes(), "vacuum_running": vacuum_now(),
            "busy": busy, "total": total}


def cycle(store: Any, seconds: float, threads: int, every: float) -> dict[str, Any]:
    """Jobs going round (claim, reschedule one period later) for ``seconds``,
    sampled every ``every`` seconds; autovacuum emulated if the server has it off.
    Every vacuum of the table meanwhile (the server's autovacuum, the emulation's) is
    timed by a :class:`VacuumWatch`."""
    from bench.autovacuum import Autovacuum, autovacuum_is_on
    from bench.proc_stats import machine_busy_seconds

    emulated = None if autovacuum_is_on() else Autovacuum(f"{benv.SCHEMA}.due_jobs")
    watch = VacuumWatch()

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
    watch.start()
    if emulated is not None:
        emulated.start()
    busy, total = machine_busy_seconds()
    samples = [{"at_s": 0, "cycles": 0, "busy": busy, "total": total}]
    while time.monotonic() - t0 < seconds:
        time.sleep(min(every, max(0.1, seconds - (time.monotonic() - t0))))
        samples.append(sample(t0, sum(done), samples[-1]))
        print({k: v for k, v in samples[-1].items() if k not in ("busy", "total")}, flush=True)
    for kept in samples:
        kept.pop("busy")
        kept.pop("total")
    stop.set()
    for runner in runners:
        runner.join()
    vacuums = "server" if emulated is None else {"emulated": True, "runs": emulated.stop()}
    watched = watch.stop()
    elapsed = time.monotonic() - t0
    stats = store.stats(datetime.now(UTC))["short"]
    lag = (datetime.now(UTC) - stats.oldest_due_at).total_seconds() \
        if stats.oldest_due_at else 0.0
    after = {"storage": storage(), **table_stats()}
    t0 = time.monotonic()
    benv.pg(f"VACUUM {benv.SCHEMA}.due_jobs")  # what autovacuum will have to do
    vacuum_seconds = time.monotonic() - t0
    return {"seconds": round(elapsed), "threads": threads, "cycles": sum(done),
            "cycles_per_s": round(sum(done) / elapsed), "autovacuum": vacuums,
            "vacuums": watched,
            "due_now_at_end": stats.due,
            "oldest_due_lag_s_at_end": round(lag), "before": before, "samples": samples,
            "after": after, "vacuum_seconds": round(vacuum_seconds, 1),
            "after_vacuum": {"storage": storage(), **table_stats()},
            "load_avg_1m_end": os.getloadavg()[0]}


def measure_step(store: Any, size: int, loaded: int, bulk: bool) -> dict[str, Any]:
    """Seed up to ``size`` and measure drain, claim, reschedule, status and storage."""
    seeded = seed(loaded, size, bulk)
    drain = drain_rate(store)
    step = {"waiting_jobs": size, "seed_seconds": round(seeded, 1), "bulk_seed": bulk,
            "drain_rows_per_s": drain, **costs(store), "storage": storage(),
            "load_avg_1m": os.getloadavg()[0]}
    print(step, flush=True)
    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--cycle-seconds", type=float, default=300)
    parser.add_argument("--cycle-threads", type=int, default=4)
    parser.add_argument("--cycle-at", type=int, default=0,
                        help="size at which the cycle runs (default: the largest)")
    parser.add_argument("--sample-seconds", type=float, default=30)
    parser.add_argument("--bulk-from", type=int, default=0,
                        help="seed steps of this size and above with indexes built after")
    parser.add_argument("--result", default="store_scale")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    cycle_at = args.cycle_at or sizes[-1]
    from scheduler.store import DueStore

    doc: dict[str, Any] = {
        "command": " ".join(["python -m bench.bench_store_scale", *sys.argv[1:]]),
        "due_spread": f"each 1M rows due over {PERIOD_SECONDS} s; rescheduled "
                      f"{PERIOD_SECONDS} s later",
        "steps": [], "cycle_at": cycle_at, "cycle": None}
    benv.setup()
    doc["postgres"] = server()
    loaded = 0
    try:
        store = DueStore.open(benv.PG_URL)
        for size in sizes:
            doc["steps"].append(measure_step(store, size, loaded,
                                             bool(args.bulk_from) and size >= args.bulk_from))
            loaded = size
            write_result(args.result, doc, partial=True)
            if size == cycle_at and args.cycle_seconds:
                doc["cycle"] = cycle(store, args.cycle_seconds, args.cycle_threads,
                                     args.sample_seconds)
                write_result(args.result, doc, partial=True)
        store.close()
    finally:
        benv.teardown()
    write_result(args.result, doc)


if __name__ == "__main__":
    main()
