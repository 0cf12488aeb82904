"""Schedulers that add up: 1, 2 and 4 ``recur scheduler`` processes on one store.

Part ``schedulers``: each step seeds ``--rows`` jobs (short bucket) in one
PostgreSQL store, all falling due at the same moment a few seconds ahead,
starts N real ``recur scheduler`` processes (watermarks out of the way,
pull-forward off, every other setting at its default), and times from the due
moment until no scheduled row is left: rows/s, and the ratio to one scheduler
measured in the same run (goal: >= 1.6x with 2). The bucket queue is purged
every second (nobody consumes it; only the drain is measured).

Part ``store``: the same rows claimed by 1, 2 and 4 processes calling the
store's own ``dispatch`` (claim 1,000 with ``FOR UPDATE SKIP LOCKED``, mark
dispatched) in a loop with no broker and no fill lock: what the store side
adds up to on its own.

For every step, from /proc/<pid>/stat (utime + stime) over the measured window:
CPU-seconds per 1,000 rows of the schedulers (or claimers), of PostgreSQL (every
``postgres`` process, plus what the postmaster reaped from backends that
exited) and of RabbitMQ's ``beam.smp``; the machine's idle share and load
average; and from those the rows/s each part could reach with the machine's
cores to itself (``cores / CPU-seconds per row``), so the limit is visible.
While the rows drain it samples the bench's own PostgreSQL backends (tagged
with an ``application_name``) every 50 ms: how many are running a statement,
how many wait on a heavyweight lock (a row or transaction lock: the claims
serializing), and which backend holds the bucket's fill lock (the per-bucket
advisory lock of ``scheduler/store/fill_lock.py``).

PostgreSQL and RabbitMQ are shared with whatever else runs on the machine: their
figures include it, and so do the load average and idle share recorded.

Each round runs every count, in order, then the next round in the reverse order
(1,2,4,4,2,1 …), so a machine whose other load drifts during the run weighs on
every count alike; the ratios come from each count's median.

    python -m bench.bench_scheduler_scaleout [--rows 200000] [--schedulers 1,2,4] \\
        [--rounds 2] [--parts schedulers,before,store] [--before-root DIR]

Part ``before`` runs the schedulers of another checkout (``--before-root``, e.g.
``git worktree add /tmp/before <commit>``) in the same rounds: the baseline of a
change to the drain, measured in the same run.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import scheduler_env as benv  # first: points the settings at the bench resources
from bench.results_io import write_result

#: Seconds between the seed and the rows' due moment: the schedulers start meanwhile.
LEAD_SECONDS = 15.0
TICKS = os.sysconf("SC_CLK_TCK")
CORES = os.cpu_count() or 1
#: Tags the bench's own PostgreSQL backends, to sample them apart from the machine's.
APP_NAME = f"recur-bench-scaleout-{benv.RUN}"
PG_URL = f"{benv.PG_URL}&application_name={APP_NAME}"
SAMPLE_SECONDS = 0.05
#: Seconds before each window in which the shared servers' own load is measured.
BACKGROUND_SECONDS = 3.0


def stat_fields(pid: int) -> list[str]:
    """/proc/<pid>/stat after the command name (field 3 first); [] if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return []


def proc_ticks(pid: int) -> int:
    """utime + stime of one process (all its threads), in clock ticks; 0 if gone."""
    fields = stat_fields(pid)
    return int(fields[11]) + int(fields[12]) if fields else 0


def family_ticks(pids: list[int]) -> int:
    """CPU of a server whose workers come and go (PostgreSQL's backends): the live
    processes' own ticks plus what the root process reaped from exited children
    (cutime + cstime), so a backend that exits between two samples still counts."""
    parents = {pid: int(fields[1]) for pid in pids if (fields := stat_fields(pid))}
    roots = [pid for pid, parent in parents.items() if parent not in parents]
    reaped = 0
    for root in roots:
        fields = stat_fields(root)
        reaped += int(fields[13]) + int(fields[14]) if fields else 0
    return sum(proc_ticks(p) for p in parents) + reaped


def pids_named(*names: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                comm = (entry / "comm").read_text().strip()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if comm in names:
                found.append(int(entry.name))
    return found


def machine_ticks() -> tuple[int, int]:
    """(busy, all) clock ticks of all cores since boot (idle and iowait are not busy)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(values[:8]) - values[3] - values[4], sum(values[:8])


class CpuSample:
    """CPU-seconds used by each process class between ``start()`` and ``stop()``.

    PostgreSQL and RabbitMQ serve the whole machine: their totals (``*_all``)
    are also given net of their rate in the ``background()`` seconds before
    the window, while the bench was idle. PostgreSQL's own figure comes from
    the bench's own backends (``Activity``)."""

    def __init__(self, client_pids: list[int]) -> None:
        self.clients = client_pids
        self.groups: dict[str, Callable[[], list[int]]] = {
            "clients": lambda: client_pids, "postgresql_all": lambda: pids_named("postgres"),
            "rabbitmq_all": lambda: pids_named("beam.smp")}
        self.idle_rates = {"postgresql_all": 0.0, "rabbitmq_all": 0.0}

    def read(self) -> dict[str, Any]:
        ticks: dict[str, Any] = {name: family_ticks(pids()) for name, pids in self.groups.items()}
        ticks["each_client"] = [proc_ticks(pid) for pid in self.clients]
        ticks["busy"], ticks["all"] = machine_ticks()
        return ticks

    def background(self, seconds: float) -> None:
        """The shared servers' CPU rate (cores) over ``seconds`` while the bench idles."""
        first, t0 = self.read(), time.monotonic()
        time.sleep(seconds)
        last, took = self.read(), time.monotonic() - t0
        self.idle_rates = {name: (last[name] - first[name]) / TICKS / took
                           for name in self.idle_rates}

    def start(self) -> None:
        self.t0, self.first = time.monotonic(), self.read()

    def stop(self) -> dict[str, Any]:
        """CPU-seconds per class, the machine's idle share and the window's length."""
        last, seconds = self.read(), time.monotonic() - self.t0
        busy, every = last["busy"] - self.first["busy"], last["all"] - self.first["all"]
        used = {name: (last[name] - self.first[name]) / TICKS for name in self.groups}
        for name, rate in self.idle_rates.items():
            used[name.replace("_all", "_net")] = max(0.0, used[name] - rate * seconds)
        return {"seconds": seconds, "cpu_s": used,
                "background_cores": {k: round(v, 2) for k, v in self.idle_rates.items()},
                "each_client_cpu_s": [round((b - a) / TICKS, 2) for a, b in
                                      zip(self.first["each_client"], last["each_client"],
                                          strict=True)],
                "machine_idle_share": round(1 - busy / max(1, every), 3),
                "load_avg": [round(x, 2) for x in os.getloadavg()]}


class Activity(threading.Thread):
    """Samples the bench's own PostgreSQL backends every 50 ms: running, waiting on a
    heavyweight lock, and who holds the bucket's fill lock."""

    def __init__(self, bucket: str = "short") -> None:
        super().__init__(daemon=True)
        import psycopg

        from bench.private_env import PG_DSN

        self.conn = psycopg.connect(PG_DSN, autocommit=True)
        row = self.conn.execute("SELECT hashtext(%s || ':' || %s)::bigint, "
                                "hashtext(%s || ':' || %s)::oid::bigint",
                                (benv.SCHEMA, f"recur.fill:{bucket}",
                                 benv.SCHEMA, f"recur.inflight:{bucket}")).fetchone()
        key = int(row[0]) if row else 0
        self.lock_ids = ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF)
        self.mark_id = int(row[1]) if row else 0
        self.stopping = threading.Event()
        self.samples = 0
        self.totals: Counter[str] = Counter()
        self.holders: Counter[int] = Counter()
        self.marked: set[int] = set()
        #: The bench's own backends: CPU ticks when the window began (0: opened in it),
        #: and at their last sample.
        self.first_ticks: dict[int, int] = {}
        self.last_ticks: dict[int, int] = {}

    def begin(self) -> None:
        """Start the window: note the own backends' CPU so far, then sample."""
        for (pid,) in self.conn.execute("SELECT pid FROM pg_stat_activity "
                                        "WHERE application_name = %s", (APP_NAME,)):
            self.first_ticks[pid] = self.last_ticks[pid] = proc_ticks(pid)
        self.start()

    def run(self) -> None:
        while not self.stopping.wait(SAMPLE_SECONDS):
            self.sample()

    def sample(self) -> None:
        rows = self.conn.execute(
            "SELECT a.pid, a.state, a.wait_event_type, a.wait_event, EXISTS (SELECT 1 "
            "FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'advisory' AND l.granted "
            "AND l.classid::bigint = %s AND l.objid::bigint = %s), (SELECT count(*) "
            "FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'advisory' AND l.granted "
            "AND l.objsubid = 2 AND l.classid::bigint = %s) "
            "FROM pg_stat_activity a WHERE a.application_name = %s",
            (*self.lock_ids, self.mark_id, APP_NAME)).fetchall()
        self.samples += 1
        for pid, state, wait, event, holds, marks in rows:
            self.last_ticks[pid] = max(self.last_ticks.get(pid, 0), proc_ticks(pid))
            self.totals["batches_in_flight"] += marks
            if marks:
                self.marked.add(pid)
            self.totals["backends"] += 1
            if state == "active":
                self.totals["active"] += 1
                self.totals[f"active_wait_{wait or 'cpu'}"] += 1
                if wait == "Lock":  # advisory: the fill lock; extend, tuple, transactionid
                    self.totals[f"active_wait_Lock_{event}"] += 1
            if holds:
                self.holders[pid] += 1

    def stop(self) -> dict[str, Any]:
        """Mean backends in each state per sample, and the fill lock's holders."""
        self.stopping.set()
        self.join()
        self.conn.close()
        n = max(1, self.samples)
        per_sample = {k: round(v / n, 2) for k, v in sorted(self.totals.items())}
        held = sum(self.holders.values())
        own = sum(t - self.first_ticks.get(pid, 0) for pid, t in self.last_ticks.items())
        return {"samples": self.samples, "own_backends_cpu_s": own / TICKS,
                "own_backends": len(self.last_ticks), "mean_backends": per_sample,
                "lock_wait_share_of_active": round(
                    self.totals["active_wait_Lock"] / max(1, self.totals["active"]), 3),
                "row_lock_wait_share_of_active": round(
                    (self.totals["active_wait_Lock_tuple"]
                     + self.totals["active_wait_Lock_transactionid"])
                    / max(1, self.totals["active"]), 3),
                "fill_lock_held_share": round(held / n, 2),
                "fill_lock_holders": len(self.holders),
                "fill_lock_top_holder_share": round(
                    max(self.holders.values(), default=0) / max(1, held), 2),
                "schedulers_with_batches_in_flight": len(self.marked)}


def figures(mode: str, n: int, rows: int, cpu: dict[str, Any],
            activity: dict[str, Any]) -> dict[str, Any]:
    """Rows/s, CPU-seconds per 1,000 rows by class and the rows/s each class (and
    recur as a whole) could reach with the machine's cores to itself."""
    seconds = cpu["seconds"]
    cpu["cpu_s"]["postgresql"] = activity.pop("own_backends_cpu_s")
    classes = ["clients", "postgresql"] + (["rabbitmq_net"] if mode != "store" else [])
    per_row = {c: cpu["cpu_s"][c] / max(rows, 1) for c in classes}
    ceiling = {c: round(CORES / v) if v else None for c, v in per_row.items()}
    whole = sum(per_row.values())
    return {
        "mode": mode, "processes": n, "rows": rows, "seconds": round(seconds, 2),
        "rows_per_s": round(rows / seconds), "rows_per_s_each": round(rows / seconds / n),
        "cpu_s_per_1000_rows": {c: round(v * 1000, 3) for c, v in per_row.items()},
        "cores_used": {c: round(v / seconds, 2) for c, v in cpu["cpu_s"].items()},
        "shared_servers_background_cores": cpu["background_cores"],
        "each_process_cpu_s": cpu["each_client_cpu_s"],
        "ceiling_rows_per_s_with_all_cores": {**ceiling, "recur_whole": round(CORES / whole)},
        # One scheduler process fills a bucket at a time (its fill lock) and its lanes
        # share one interpreter: one core of scheduler is that bucket's ceiling.
        "ceiling_one_client_core": round(1 / per_row["clients"]) if per_row["clients"] else None,
        "machine_idle_share": cpu["machine_idle_share"], "load_avg": cpu["load_avg"],
        "activity": activity}


def purge_loop(stop: threading.Event) -> None:
    from bench.bench_scheduler import purge

    while not stop.wait(1.0):
        purge()


class Remaining:
    """Whether scheduled rows are left, polled on one connection (one probe of the
    drain index: a count would scan the rows and weigh on PostgreSQL's figures)."""

    def __init__(self) -> None:
        import psycopg

        from bench.private_env import PG_DSN

        self.conn = psycopg.connect(PG_DSN, autocommit=True)

    def any_left(self) -> bool:
        row = self.conn.execute(
            f"SELECT EXISTS (SELECT 1 FROM {benv.SCHEMA}.due_jobs WHERE bucket = 'short' "
            f"AND state = 0 AND due_at <= now())").fetchone()
        return bool(row and row[0])

    def count(self) -> int:
        row = self.conn.execute(
            f"SELECT count(*) FROM {benv.SCHEMA}.due_jobs WHERE state = 0").fetchone()
        return int(row[0]) if row else 0

    def close(self) -> None:
        self.conn.close()


def seed(rows: int, lead: float) -> datetime:
    """``rows`` short-bucket jobs all due ``lead`` seconds from now; their due moment."""
    benv.pg(f"TRUNCATE {benv.SCHEMA}.due_jobs")
    due = datetime.now(UTC) + timedelta(seconds=lead)
    benv.pg(benv.seed_sql(rows, "short", f"'{due.isoformat()}'::timestamptz"))
    benv.pg(f"VACUUM ANALYZE {benv.SCHEMA}.due_jobs")
    return due


def measure(pids: list[int], alive: Callable[[], bool], go: Callable[[], None]
            ) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """The shared servers' background for BACKGROUND_SECONDS, then ``go()``, then time
    the drain until no due row is left: rows, CPU, activity."""
    cpu, activity, left = CpuSample(pids), Activity(), Remaining()
    try:
        before = left.count()
        cpu.background(BACKGROUND_SECONDS)
        go()
        cpu.start()
        activity.begin()
        deadline = time.monotonic() + 600
        while left.any_left() and time.monotonic() < deadline and alive():
            time.sleep(0.1)
        usage = cpu.stop()
        sampled = activity.stop()
        return before - left.count(), usage, sampled
    finally:
        left.close()


def scheduler_step(schedulers: int, rows: int, log_dir: Path, root: Path = benv.ROOT,
                   mode: str = "schedulers") -> dict[str, Any]:
    """Seed ``rows`` due in LEAD_SECONDS, start the schedulers (the code under
    ``root``), time the drain."""
    from tests.support.processes import recur_argv, spawn

    due = seed(rows, LEAD_SECONDS)
    env = {**os.environ, **benv.ENV, "RECUR_DATABASE_URL": PG_URL,
           "RECUR_LOW_WATERMARK": "1000000000", "RECUR_HIGH_WATERMARK": "1000000000",
           "RECUR_PULL_FORWARD": ""}
    children = [spawn(f"{mode}-{schedulers}-{n}", recur_argv("scheduler"), log_dir, env,
                      cwd=root) for n in range(schedulers)]
    stop_purging = threading.Event()
    purger = threading.Thread(target=purge_loop, args=(stop_purging,), daemon=True)
    purger.start()
    try:
        time.sleep(max(0.0, (due - datetime.now(UTC)).total_seconds() - BACKGROUND_SECONDS
                       - 0.5))
        if any(c.proc.poll() is not None for c in children):
            raise RuntimeError("a scheduler exited before the rows fell due:\n"
                               + "\n".join(c.log()[-2000:] for c in children))
        drained, usage, sampled = measure(
            [c.pid for c in children], lambda: all(c.proc.poll() is None for c in children),
            lambda: time.sleep(max(0.0, (due - datetime.now(UTC)).total_seconds())))
    finally:
        stop_purging.set()
        purger.join()
        for child in children:
            child.stop()
    return figures(mode, schedulers, drained, usage, sampled)


def claim_loop(start: Any, batch: int) -> None:
    """One store-side claimer (a forked process): claim and mark dispatched, no broker."""
    from scheduler.store import DueStore

    store = DueStore.open(PG_URL)
    start.wait()
    lease = datetime.now(UTC) + timedelta(hours=1)
    while store.dispatch("short", batch, datetime.now(UTC), lease, lambda rows: None):
        pass
    store.close()


def store_step(claimers: int, rows: int, batch: int) -> dict[str, Any]:
    """The same rows claimed by ``claimers`` processes through ``DueStore.dispatch``."""
    seed(rows, -1.0)
    ctx = multiprocessing.get_context("fork")
    start = ctx.Event()
    procs = [ctx.Process(target=claim_loop, args=(start, batch)) for _ in range(claimers)]
    for proc in procs:
        proc.start()
    time.sleep(1.0)  # each has opened its store
    try:
        drained, usage, sampled = measure([p.pid for p in procs if p.pid],
                                          lambda: any(p.is_alive() for p in procs), start.set)
    finally:
        for proc in procs:
            proc.join(60)
    return figures("store", claimers, drained, usage, sampled)


def summary(steps: list[dict[str, Any]], counts: list[int]) -> dict[str, Any]:
    """Median rows/s per count, and its ratio to the first count's."""
    median = {n: statistics.median(s["rows_per_s"] for s in steps if s["processes"] == n)
              for n in counts}
    return {"median_rows_per_s": {str(n): round(v) for n, v in median.items()},
            "ratio_to_one": {str(n): round(v / median[counts[0]], 2)
                             for n, v in median.items()}}


def show(step: dict[str, Any]) -> None:
    act = step["activity"]
    print(f"{step['mode']:>10} x{step['processes']}: {step['rows_per_s']:>6} rows/s; "
          f"CPU s/1000 rows {step['cpu_s_per_1000_rows']}; ceilings "
          f"{step['ceiling_rows_per_s_with_all_cores']}; idle {step['machine_idle_share']}; "
          f"load {step['load_avg'][0]}; lock-wait share {act['lock_wait_share_of_active']}; "
          f"fill lock held {act['fill_lock_held_share']} by {act['fill_lock_holders']}",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--schedulers", default="1,2,4")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--parts", default="schedulers,store")
    parser.add_argument("--batch", type=int, default=1000, help="store part's claim size")
    parser.add_argument("--before-root", type=Path, default=None,
                        help="a checkout of the code before (part 'before': its schedulers)")
    args = parser.parse_args()
    counts = [int(n) for n in args.schedulers.split(",")]
    order = [n for r in range(args.rounds) for n in (counts if r % 2 == 0 else counts[::-1])]
    parts = args.parts.split(",")
    log_dir = Path(tempfile.mkdtemp(prefix="recur-bench-scaleout-"))
    benv.setup()
    try:
        steps: dict[str, list[dict[str, Any]]] = {part: [] for part in parts}
        for n in order:  # the parts interleaved, so the machine's drift weighs on each alike
            for part in parts:
                steps[part].append(
                    store_step(n, args.rows, args.batch) if part == "store" else
                    scheduler_step(n, args.rows, log_dir, args.before_root, "before")
                    if part == "before" else scheduler_step(n, args.rows, log_dir))
                show(steps[part][-1])
        results = {part: {"steps": done, **summary(done, counts)}
                   for part, done in steps.items()}
    finally:
        benv.teardown()
    write_result("scheduler_scaleout", {
        "command": f"python -m bench.bench_scheduler_scaleout --rows {args.rows} "
                   f"--schedulers {args.schedulers} --rounds {args.rounds} "
                   f"--parts {args.parts} --batch {args.batch}"
                   + (f" --before-root {args.before_root}" if args.before_root else ""),
        "goal": ">= 1.6x the rows/s of one scheduler with 2", "cores": CORES,
        **results, "logs": str(log_dir)})


if __name__ == "__main__":
    main()
