"""``recur jobs list`` on a large PostgreSQL store, and what migration 0005 costs there.

1. Loads ``--rows`` jobs (default 1M: 3 buckets, 100,000 users, two tasks, due
   over the next hour, 1 % dispatched) at revision 0004, then times
   ``recur db upgrade`` to 0005_i14 (two columns with constant defaults, two
   indexes) and records the table's and each index's size before and after;
   the last tenth of the rows is inserted again after the migration (deleted
   first), to measure what the two indexes cost each insert (rows/s, both
   measured in this run). The loaded rows lack the columns added since 0004
   (their defaults live in the catalog), so the bytes per job are also given
   with the heap as rows written at head take (``after_0005_rows_at_head``).
2. Times pages of ``recur jobs list`` through the same API the command calls
   (``scheduler.jobs.list_jobs``), for each filter: the first page, and a page
   deep in the list (from a cursor half-way through, and after following 100
   pages), median of ``--repeat`` runs each.
3. Times the idle pull-forward claim (``CLAIM_EARLY``) of a batch, and when no
   row's floor has passed, against the baseline of the same claim in due order
   on ``ix_due_jobs_scheduled`` (in the same run); and a user's
   ``recur jobs cancel --user``.

Runs in its own PostgreSQL schema, dropped afterwards.

    flock /tmp/recur-bench.lock .venv/bin/python -m bench.bench_jobs [--rows 1000000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.private_env import PrivateEnv, pg
from bench.results_io import write_result

ENVIRONMENT = PrivateEnv("jobs").activate()
SCHEMA = ENVIRONMENT.schema


def seed(first: int, rows: int) -> float:
    """Jobs ``first+1..first+rows`` in the stored compact form ``[user_id, payload]``,
    inserted in one statement per 250,000; the seconds the inserts took."""
    t0 = time.monotonic()
    step = 250_000
    for start in range(first, first + rows, step):
        last = min(first + rows, start + step)
        pg(f"INSERT INTO {SCHEMA}.due_jobs (job_key, task_id, bucket, args, due_at, state) "
           f"SELECT 'j' || i, 1 + (i % 10 = 0)::int, "
           f"(ARRAY['short','medium','long'])[1 + i % 3], "
           f"'[\"' || md5((i % 100000)::text)::uuid::text "
           f"|| '\",{{\"every\":3600,\"runs\":null}}]', "
           f"now() + (i * interval '3600 seconds') / {first + rows}, (i % 100 = 0)::int "
           f"FROM generate_series({start + 1}, {last}) AS i")
    seconds = time.monotonic() - t0
    pg(f"VACUUM ANALYZE {SCHEMA}.due_jobs")
    return seconds


def sizes() -> dict[str, Any]:
    table, total = pg(f"SELECT pg_relation_size('{SCHEMA}.due_jobs'), "
                      f"pg_total_relation_size('{SCHEMA}.due_jobs')")[0]
    indexes = pg(f"SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) FROM pg_index "
                 f"WHERE indrelid = '{SCHEMA}.due_jobs'::regclass")
    rows = max(int(pg(f"SELECT count(*) FROM {SCHEMA}.due_jobs")[0][0]), 1)
    # Bytes per waiting job, by relation (#26: <= 250 in all at 10M, UUID users).
    return {"table_bytes": table, "total_bytes": total,
            "bytes_per_job": round(int(total) / rows, 1),
            "indexes": {str(n).split(".")[-1]: s for n, s in indexes},
            "bytes_per_job_by_relation": {
                "heap": round(int(table) / rows, 1),
                **{str(n).split(".")[-1]: round(int(s) / rows, 1) for n, s in indexes}}}


def as_written_at_head(measured: dict[str, Any]) -> dict[str, Any]:
    """The heap as the current code writes rows, and the bytes per job with it.

    The rows were loaded at 0004: the columns later migrations added with a
    default (``early_at``, ``runs``, ``turn``) are not in them but in the catalog
    (a fast default), so their heap is ~18 B a row smaller than that of every row
    a store at head holds (a seed, ``apply_async``, each reschedule). A copy of
    the table (CREATE TABLE AS: each row formed again, all columns stored)
    measures the heap at head; the indexes are the measured ones."""
    pg(f"CREATE TABLE {SCHEMA}.head_form AS SELECT * FROM {SCHEMA}.due_jobs")
    try:
        table = int(pg(f"SELECT pg_relation_size('{SCHEMA}.head_form')")[0][0])
    finally:
        pg(f"DROP TABLE {SCHEMA}.head_form")
    rows = max(int(pg(f"SELECT count(*) FROM {SCHEMA}.due_jobs")[0][0]), 1)
    total = int(measured["total_bytes"]) - int(measured["table_bytes"]) + table
    return {"table_bytes": table, "heap": round(table / rows, 1),
            "bytes_per_job": round(total / rows, 1)}


def median_ms(run: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return round(statistics.median(times) * 1000, 2)


def pages(rows: int, repeat: int) -> dict[str, Any]:
    from scheduler import jobs as api
    from scheduler.store import DueStore
    from scheduler.store.control import JobControl, JobFilter, encode_cursor

    store = DueStore.open(ENVIRONMENT.pg_url)
    ctl = JobControl(store)
    user = pg("SELECT md5('4242')::uuid::text")[0][0]
    soon = datetime.now(UTC) + timedelta(minutes=30)
    filters = {
        "none": JobFilter(),
        "user": JobFilter(user=user),
        "bucket+state": JobFilter(bucket="short", state="scheduled"),
        "state dispatched": JobFilter(state="dispatched"),
        "bucket (not served by an index: bounded walk)": JobFilter(bucket="long"),
        "task (rare: 10 %, bounded walk)": JobFilter(task="tasks.other"),
        "due-before, bucket+state": JobFilter(bucket="medium", state="scheduled",
                                              due_before=soon),
    }
    middle_key = f"j{rows // 2}"
    middle_due = pg(f"SELECT due_at FROM {SCHEMA}.due_jobs WHERE job_key = '{middle_key}'")[0][0]
    out: dict[str, Any] = {}
    try:
        for name, f in filters.items():
            first = api.list_jobs(ctl, f, 50)
            walk = ctl.walk_of(f, ctl.task_code(f.task) if f.task else None)
            deep = encode_cursor([middle_key] if len(walk.order) == 1
                                 else [middle_due, middle_key])
            cursor = first.cursor
            followed = 0
            t0 = time.perf_counter()
            while cursor and followed < 100:
                cursor = api.list_jobs(ctl, f, 50, cursor).cursor
                followed += 1
            follow_s = time.perf_counter() - t0
            out[name] = {
                "index": first.index, "first_page_jobs": len(first.jobs),
                "first_page_walked": first.walked,
                "first_page_ms": median_ms(lambda f=f: api.list_jobs(ctl, f, 50), repeat),
                "deep_page_ms": median_ms(lambda f=f, d=deep: api.list_jobs(ctl, f, 50, d),
                                          repeat),
                "pages_followed": followed,
                "ms_per_followed_page": round(follow_s * 1000 / max(followed, 1), 2),
            }
            if cursor:
                out[name]["page_101_ms"] = median_ms(
                    lambda f=f, c=cursor: api.list_jobs(ctl, f, 50, c), repeat)
        out["_show_ms"] = median_ms(lambda: api.show(ctl, middle_key), repeat)
    finally:
        store.close()
    return out


def claim_and_cancel(repeat: int) -> dict[str, Any]:
    """The idle claim of a batch of never-run rows, then with no row's floor passed (every
    short row just ran: floors an hour ahead); one user's cancel."""
    from scheduler.store import CLAIM_EARLY, DueStore
    from scheduler.store.control import JobControl

    figures = claim_early(CLAIM_EARLY, repeat, "batch")
    pg(f"UPDATE {SCHEMA}.due_jobs SET early_at = due_at + interval '1 hour' "
       "WHERE bucket = 'short' AND state = 0")
    pg(f"VACUUM ANALYZE {SCHEMA}.due_jobs")
    figures.update(claim_early(CLAIM_EARLY, repeat, "none_eligible"))
    figures.update(claim_early(due_ordered_claim(), repeat, "due_ordered_baseline"))
    store = DueStore.open(ENVIRONMENT.pg_url)
    try:
        user = pg("SELECT md5('777')::uuid::text")[0][0]
        t0 = time.perf_counter()
        cancelled = JobControl(store).cancel_user(user)
        figures["cancel_user_ms"] = round((time.perf_counter() - t0) * 1000, 2)
        figures["cancel_user_jobs"] = sum(cancelled.values())
    finally:
        store.close()
    return figures


def due_ordered_claim() -> Any:
    """The baseline: the same claim in due order on ix_due_jobs_scheduled, filtering
    on the floor (what the claim would be without ix_due_jobs_early)."""
    from sqlalchemy import bindparam, select

    from scheduler.store.schema import SCHEDULED, UtcDateTime, due_jobs

    c = due_jobs.c
    return (select(c.job_key, c.task_id, c.args, c.due_at, c.token)
            .where(c.bucket == bindparam("bucket"), c.state == SCHEDULED,
                   c.early_at <= bindparam("now", type_=UtcDateTime()))
            .order_by(c.due_at).limit(bindparam("limit")).with_for_update(skip_locked=True))


def claim_early(claim_sql: Any, repeat: int, name: str) -> dict[str, Any]:
    """Time the idle pull-forward claim of the short bucket (a SELECT ... FOR UPDATE in its
    own transaction: nothing moves)."""
    from scheduler.store import DueStore

    store = DueStore.open(ENVIRONMENT.pg_url)
    try:
        compiled = claim_sql.compile(dialect=store.engine.dialect)
        sql = str(compiled)
        params = {**compiled.params, "bucket": "short", "now": datetime.now(UTC), "limit": 1000}

        def claim() -> int:
            with store.engine.begin() as conn:
                return len(conn.exec_driver_sql(sql, params).all())

        found = claim()
        claim_ms = median_ms(claim, repeat)
        with store.engine.begin() as conn:
            plan = conn.exec_driver_sql("EXPLAIN " + sql, params).all()
    finally:
        store.close()
    return {f"claim_early_{name}_rows_found": found, f"claim_early_{name}_ms": claim_ms,
            f"claim_early_{name}_plan": [str(r[0]) for r in plan][:4]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    from scheduler.store.connection import make_engine
    from scheduler.store.migrate import upgrade

    pg(f"CREATE SCHEMA {SCHEMA}")
    figures: dict[str, Any] = {
        "command": f"python -m bench.bench_jobs --rows {args.rows} --repeat {args.repeat}"}
    try:
        engine = make_engine(ENVIRONMENT.pg_url)
        upgrade(engine, "0004")
        pg(f"INSERT INTO {SCHEMA}.due_tasks (name) VALUES ('tasks.process_message'), "
           "('tasks.other')")
        extra = max(args.rows // 10, 1000)
        # The write cost of the two new indexes: the same inserts (as the seed's
        # COPY writes rows) before and after the migration, on the same table size.
        inserted = seed(0, args.rows - extra)
        before = seed(args.rows - extra, extra)
        figures["insert_rows_per_s_at_0004"] = round(extra / before)
        figures["seed_seconds"] = round(inserted + before, 1)
        figures["before_0005"] = sizes()
        t0 = time.monotonic()
        upgrade(engine)
        # To the newest revision: 0005's two indexes, rebuilt leaner by 0008 (#26).
        figures["upgrade_0005_seconds"] = round(time.monotonic() - t0, 1)
        engine.dispose()
        pg(f"VACUUM ANALYZE {SCHEMA}.due_jobs")
        figures["after_0005"] = sizes()
        # #26's figure: every index, rows as a store at head holds them.
        figures["after_0005_rows_at_head"] = as_written_at_head(figures["after_0005"])
        pg(f"DELETE FROM {SCHEMA}.due_jobs WHERE job_key IN (SELECT 'j' || i FROM "
           f"generate_series({args.rows - extra + 1}, {args.rows}) AS i)")
        pg(f"VACUUM ANALYZE {SCHEMA}.due_jobs")
        after = seed(args.rows - extra, extra)
        figures["insert_rows_per_s_at_0005"] = round(extra / after)
        figures["insert_cost_ratio_0005_vs_0004"] = round(after / before, 2)
        figures["rows"] = args.rows
        figures["list_pages"] = pages(args.rows, args.repeat)
        figures["claim_and_cancel"] = claim_and_cancel(args.repeat)
        figures["goal"] = "each page of recur jobs list well under a second at 1M rows"
    finally:
        pg(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    write_result("jobs", figures)


if __name__ == "__main__":
    main()
