"""Flower's Scheduled page at a large store: the first and the 100th page, per filter.

Seeds ``--rows`` jobs (default 10M) in a private PostgreSQL schema the fast way
(``bench_store_scale.seed``: server-side inserts with the secondary indexes
dropped and built again after), one job in a hundred dispatched; starts a real
``recur flower`` on it and loads the page through HTTP with its login, as a
browser would (the whole HTML response: the store's read, the template, the
transfer). For each view it follows the page's own "Next page" links from the
first page to the 100th, then loads the first and the 100th page ``--repeats``
times each and records the medians, the rows each walked and on which index:

- ``all``: no filter (the primary key);
- ``bucket``: a bucket's scheduled jobs by due time (``ix_due_jobs_scheduled``);
- ``dispatched``: the jobs in flight by lease end (``ix_due_jobs_leased``);
- ``user``: one user's jobs (``ix_due_jobs_user``; as many pages as the user has);
- ``unserved``: a filter no index serves (state set-aside, none there): each page
  walks its bound of rows and comes back empty with a cursor.

Keyset paging: the 100th page should cost what the first does, whatever the
rows. Records the machine's load average before and after. Writes
``bench/results/<--result>.json``. Runs in its own schema (and vhost), removed after.

    python -m bench.bench_flower_scheduled [--rows 10000000] [--repeats 5]
    python -m bench.bench_flower_scheduled --rows 200000   # a quick proof that it runs
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from html import unescape
from pathlib import Path
from typing import Any

import httpx

from bench import scheduler_env as benv  # first: points the settings at the bench resources
from bench.bench_store_scale import seed
from bench.results_io import write_result
from scheduler.wire import decode_call
from tests.support.flower_process import wait_until_answering
from tests.support.processes import Child, recur_argv, spawn
from tests.support.services import free_port

USER, PASSWORD = "bench", "bench-scheduled"
VIEWS = {"all": "", "bucket": "bucket=short&state=scheduled", "dispatched": "state=dispatched",
         "user": "user={user}", "unserved": "state=set-aside"}
#: One job in this many is marked dispatched (a lease 10 minutes out).
DISPATCHED_EVERY = 100
NEXT = re.compile(r'id="next-page" href="([^"]+)"')
COST = re.compile(r'<span id="page-cost">(\d+) job\(s\)(?:, (\d+) row\(s\) walked on (\w+))?')


def mark_dispatched(rows: int) -> None:
    benv.pg(f"UPDATE {benv.SCHEMA}.due_jobs SET state = 1, token = 1, attempts = 1, "
            "due_at = now() + interval '10 minutes' WHERE job_key IN (SELECT 'j' || i FROM "
            f"generate_series(1, {rows}, {DISPATCHED_EVERY}) AS i)")
    benv.pg(f"VACUUM ANALYZE {benv.SCHEMA}.due_jobs")


def a_user() -> str:
    """The user of job j1 (each of the 100,000 users has rows/100,000 jobs)."""
    args = benv.pg(f"SELECT args FROM {benv.SCHEMA}.due_jobs WHERE job_key = 'j1'")[0][0]
    return str(decode_call(args, "j1", "short")[0][0]["user_id"])


def start_flower(port: int, logs: Path) -> Child:
    env = {**os.environ, **benv.ENV, "RECUR_FLOWER_USER": USER, "RECUR_FLOWER_PASSWORD": PASSWORD,
           "RECUR_FLOWER_PORT": str(port), "RECUR_LOG_LEVEL": "WARNING"}
    child = spawn("flower", recur_argv("flower", "--address=127.0.0.1"), logs, env,
                  cwd=benv.ROOT)
    wait_until_answering(child, f"http://127.0.0.1:{port}", 120)
    return child


def load(client: Any, url: str) -> tuple[float, str]:
    """Milliseconds to GET ``url`` whole, and its HTML (a failed load stops the run)."""
    t0 = time.perf_counter()
    reply = client.get(url)
    ms = (time.perf_counter() - t0) * 1000
    if reply.status_code != 200:
        raise RuntimeError(f"{url}: HTTP {reply.status_code}: {reply.text[-500:]}")
    return ms, reply.text


def cost(html: str) -> dict[str, Any]:
    found = COST.search(html)
    assert found, html[-1500:]
    jobs, walked, index = found.groups()
    return {"jobs": int(jobs), "walked": int(walked or 0), "index": index}


def measure_view(client: Any, base: str, query: str, repeats: int) -> dict[str, Any]:
    """Follow Next from page 1 to 100 (or the end), then the medians of pages 1 and last."""
    url: str | None = f"{base}/scheduled{'?' + query if query else ''}"
    urls: list[str] = []
    walk_ms: list[float] = []
    while url is not None and len(urls) < 100:
        urls.append(url)
        ms, html = load(client, url)
        walk_ms.append(ms)
        found = NEXT.search(html)
        url = f"{base}{unescape(found.group(1))}" if found else None
    doc: dict[str, Any] = {"query": query, "pages_followed": len(walk_ms),
                           "follow_ms_median": round(statistics.median(walk_ms), 1)}
    for name, page_url in (("first", urls[0]), (f"page_{len(urls)}", urls[-1])):
        times, html = [], ""
        for _ in range(repeats):
            ms, html = load(client, page_url)
            times.append(ms)
        doc[name] = {"median_ms": round(statistics.median(times), 1),
                     "max_ms": round(max(times), 1), **cost(html)}
    return doc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--result", default="flower_scheduled")
    args = parser.parse_args()
    doc: dict[str, Any] = {"command": " ".join(["python -m bench.bench_flower_scheduled",
                                                *sys.argv[1:]]),
                           "rows": args.rows, "repeats": args.repeats,
                           "load_avg_before": os.getloadavg(), "views": {}}
    benv.setup()
    child = None
    try:
        doc["seed_s"] = round(seed(0, args.rows, bulk=True), 1)
        mark_dispatched(args.rows)
        port = free_port()
        child = start_flower(port, Path(tempfile.mkdtemp(prefix="bench-flower-")))
        base = f"http://127.0.0.1:{port}"
        user = a_user()
        with httpx.Client(auth=(USER, PASSWORD), timeout=120) as client:
            load(client, f"{base}/scheduled")  # warm: the store's pool, the template
            for name, query in VIEWS.items():
                doc["views"][name] = measure_view(client, base, query.format(user=user),
                                                  args.repeats)
                print(name, doc["views"][name], flush=True)
        doc["load_avg_after"] = os.getloadavg()
        write_result(args.result, doc)
    finally:
        if child is not None:
            child.stop()
        benv.teardown()


if __name__ == "__main__":
    main()
