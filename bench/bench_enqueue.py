"""Enqueue at the store's speed: one client process's delayed ``apply_async`` and
``apply_many`` into PostgreSQL, against today's one-commit-per-call path in the same run.

Each figure is measured in a fresh client process (a child of this one), one
after the other, the table emptied before each, every call a new message of ~100
bytes delayed an hour (a row in the due-jobs store):

* ``sequential``: one thread, ``--calls`` calls: ``before`` (the code before this
  work: one commit per call and the upsert statement built anew for each, as
  ``DueStore.schedule`` did), ``baseline`` (``RECUR_GROUP_COMMIT=0``: one upsert +
  commit per call, the statement built once) and ``group_commit`` (a lone caller
  must not be slower);
* ``threads_T``: T threads sharing ``--calls`` calls, group commit off (baseline)
  and on; with it, the commits made and rows per commit;
* ``asyncio_T``: T coroutines awaiting ``asyncio.to_thread(task.apply_async, …)``
  (an executor of T threads), group commit on;
* ``bulk``: ``task.apply_many`` of ``--bulk-rows`` calls in calls of ``--bulk-batch``
  (new keys), then the same calls again (every key already there: the upsert).

Calls/s (wall), the client's CPU per call, per-call latency p50/p99 (ms) and the load
average around each figure; every repeat kept, medians in ``median``. PostgreSQL in
a private schema, dropped afterwards. Writes bench/results/enqueue.json.

    flock /tmp/recur-bench.lock .venv/bin/python -m bench.bench_enqueue
    .venv/bin/python -m bench.bench_enqueue --calls 300 --bulk-rows 5000 --repeat 1 \\
        --threads 8 --allow-busy   # a quick look at tiny sizes
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

from bench.private_env import PrivateEnv, pg
from bench.results_io import write_result

ENVIRONMENT = PrivateEnv("enqueue")
#: ~100 bytes stored per call, as the population's messages.
USER = "6f1c2d3e-0000-4000-8000-{:012d}"


def message(prefix: str, i: int) -> dict[str, Any]:
    return {"id": f"{prefix}-{i}", "user_id": USER.format(i % 100_000), "bucket": "short",
            "payload": {"n": i}}


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else 0.0


# -- the child: one client process, one figure ------------------------------------------

def child_calls(threads: int, calls: int, prefix: str, use_asyncio: bool) -> dict[str, Any]:
    """``calls`` apply_async calls from ``threads`` threads (or coroutines)."""
    import asyncio
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from config.settings import settings
    from scheduler.group_commit import committer
    from scheduler.store import get_store
    from tasks import process_message

    process_message.apply_async(args=[message(prefix + "w", 0)], countdown=3600)  # warm up
    per = calls // threads
    latencies: list[list[float]] = [[] for _ in range(threads)]

    def one(t: int, i: int) -> None:
        started = time.perf_counter()
        process_message.apply_async(args=[message(f"{prefix}-{t}", i)], countdown=3600)
        latencies[t].append(time.perf_counter() - started)

    def run(t: int) -> None:
        for i in range(per):
            one(t, i)

    async def gather() -> None:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(threads))

        async def worker(t: int) -> None:
            for i in range(per):
                await asyncio.to_thread(one, t, i)
        await asyncio.gather(*(worker(t) for t in range(threads)))

    gc = committer(get_store(settings().database_url))
    commits0, load0 = gc.commits, os.getloadavg()[0]
    cpu0, t0 = time.process_time(), time.perf_counter()
    if use_asyncio:
        asyncio.run(gather())
    else:
        pool = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    done = per * threads
    every = [x for lane in latencies for x in lane]
    commits = gc.commits - commits0
    return {"calls": done, "seconds": round(seconds, 3), "calls_per_s": round(done / seconds),
            "cpu_us_per_call": round(cpu / done * 1e6, 1),
            "p50_ms": round(percentile(every, 0.5) * 1000, 2),
            "p99_ms": round(percentile(every, 0.99) * 1000, 2),
            "commits": commits, "rows_per_commit": round(done / commits, 1) if commits else None,
            "load_1m": [round(load0, 2), round(os.getloadavg()[0], 2)]}


def child_bulk(rows: int, batch: int, prefix: str) -> dict[str, Any]:
    """``rows`` calls through apply_many, ``batch`` a call: new keys, then the same again."""
    from tasks import process_message

    process_message.apply_many([message(prefix + "w", 0)], countdown=3600)  # warm up
    calls = [message(prefix, i) for i in range(rows)]
    out: dict[str, Any] = {"rows": rows, "batch": batch}
    for label in ("new", "existing"):
        load0 = os.getloadavg()[0]
        cpu0, t0 = time.process_time(), time.perf_counter()
        for start in range(0, rows, batch):
            process_message.apply_many(calls[start:start + batch], countdown=3600)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        out[label] = {"seconds": round(seconds, 3), "rows_per_s": round(rows / seconds),
                      "cpu_us_per_row": round(cpu / rows * 1e6, 1),
                      "load_1m": [round(load0, 2), round(os.getloadavg()[0], 2)]}
    return out


def child(args: argparse.Namespace) -> None:
    if os.environ.get("RECURBENCH_UNCACHED_UPSERT") == "1":  # the code before: built per call
        from scheduler.store import core, queries
        core._upsert_jobs = queries.upsert_jobs
    if args.child == "bulk":
        figures = child_bulk(args.bulk_rows, args.bulk_batch, args.prefix)
    else:
        figures = child_calls(args.child_threads, args.calls, args.prefix,
                              args.child == "asyncio")
    print(json.dumps(figures))


# -- the parent: schema, one child per figure, results ----------------------------------

def measure(kind: str, args: argparse.Namespace, prefix: str, *, threads: int = 1,
            group_commit: bool = True, before: bool = False) -> dict[str, Any]:
    """Empty the table, run one child for one figure, return its figures."""
    pg(f"TRUNCATE {ENVIRONMENT.schema}.due_jobs")
    env = {**os.environ, "RECUR_GROUP_COMMIT": "1" if group_commit else "0",
           "RECURBENCH_UNCACHED_UPSERT": "1" if before else "0"}
    cmd = [sys.executable, "-m", "bench.bench_enqueue", "--child", kind, "--prefix", prefix,
           "--child-threads", str(threads), "--calls", str(args.calls),
           "--bulk-rows", str(args.bulk_rows), "--bulk-batch", str(args.bulk_batch)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"recur bench: the {kind} client failed:\n{done.stderr[-3000:]}")
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    figures["rows_in_store"] = pg(f"SELECT count(*) FROM {ENVIRONMENT.schema}.due_jobs")[0][0]
    return figures


def one_repeat(args: argparse.Namespace, n: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every figure once: (flat numbers for the medians, the children's full figures)."""
    flat: dict[str, Any] = {}
    full: dict[str, Any] = {}

    def keep(name: str, figures: dict[str, Any], *numbers: str) -> None:
        full[name] = figures
        for key in numbers:
            flat[f"{name}_{key}"] = figures[key]

    for mode in ("before", "baseline", "group_commit"):
        keep(f"sequential_{mode}",
             measure("calls", args, f"r{n}s{mode}", group_commit=mode == "group_commit",
                     before=mode == "before"),
             "calls_per_s", "cpu_us_per_call", "p50_ms", "p99_ms")
    for threads in args.threads:
        for gc in (False, True):
            mode = "group_commit" if gc else "baseline"
            figures = measure("calls", args, f"r{n}t{threads}{int(gc)}", threads=threads,
                              group_commit=gc)
            keep(f"threads_{threads}_{mode}", figures, "calls_per_s", "cpu_us_per_call",
                 "p50_ms", "p99_ms")
            if gc:
                flat[f"threads_{threads}_rows_per_commit"] = figures["rows_per_commit"]
    for threads in args.asyncio:
        keep(f"asyncio_{threads}_group_commit",
             measure("asyncio", args, f"r{n}a{threads}", threads=threads),
             "calls_per_s", "cpu_us_per_call", "p50_ms", "p99_ms")
    bulk = measure("bulk", args, f"r{n}b")
    full["bulk"] = bulk
    flat["bulk_new_rows_per_s"] = bulk["new"]["rows_per_s"]
    flat["bulk_existing_rows_per_s"] = bulk["existing"]["rows_per_s"]
    flat["bulk_new_cpu_us_per_row"] = bulk["new"]["cpu_us_per_row"]
    return flat, full


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=6000, help="apply_async calls a figure")
    parser.add_argument("--threads", type=lambda s: [int(x) for x in s.split(",")],
                        default=[8, 32], help="thread counts, e.g. 8,32")
    parser.add_argument("--asyncio", type=lambda s: [int(x) for x in s.split(",") if x],
                        default=[32], help="coroutine counts ('' for none)")
    parser.add_argument("--bulk-rows", type=int, default=200_000)
    parser.add_argument("--bulk-batch", type=int, default=50_000, help="calls per apply_many")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", choices=["calls", "asyncio", "bulk"], help=argparse.SUPPRESS)
    parser.add_argument("--child-threads", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--prefix", default="m", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    ENVIRONMENT.activate()
    from scheduler.store.connection import make_engine
    from scheduler.store.migrate import upgrade

    pg(f"CREATE SCHEMA {ENVIRONMENT.schema}")
    try:
        engine = make_engine(ENVIRONMENT.pg_url)
        upgrade(engine)
        engine.dispose()
        repeats, runs = [], []
        for n in range(args.repeat):
            flat, full = one_repeat(args, n)
            repeats.append(flat)
            runs.append(full)
            print(json.dumps(flat), file=sys.stderr, flush=True)
    finally:
        pg(f"DROP SCHEMA IF EXISTS {ENVIRONMENT.schema} CASCADE")
    write_result("enqueue", {
        "config": {"calls": args.calls, "threads": args.threads, "asyncio": args.asyncio,
                   "bulk_rows": args.bulk_rows, "bulk_batch": args.bulk_batch,
                   "repeat": args.repeat, "database": "postgresql (private schema)",
                   "row": "process_message, ~100-byte message, countdown=3600"},
        "runs": runs}, repeats)


if __name__ == "__main__":
    main()
