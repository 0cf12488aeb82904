"""Bytes per waiting job: recur's due_jobs against the least a due-jobs store can hold.

#26 asks for <= 250 bytes per waiting job with UUID users and every index. This
loads the same ``--rows`` rows, shaped as the seed's generated population
(spark/generate.py: keys ``gen-1-<n>``, 70/25/5 % short/medium/long, UUID users
with ten jobs each on average, ``[user, {"n": n, "data": <4 to 64 hex>}]``, three
in ten naming a kind; unique due times over an hour, as a worker's reschedules
give), into three tables of one schema, each packed as a bulk load leaves it
(indexes built after the rows, the primary key rebuilt):

- ``recur``: the migrated ``due_jobs`` with every index (what the seed loads);
- ``minimal_drain``: key, bucket, due time and arguments, the primary key and the
  drain's ``(bucket, due_at)`` index: the least a store that drains due jobs by
  bucket holds, whatever its design;
- ``minimal``: the same without the drain index (the issue's "minimal table").

and prints each relation's bytes per row. What recur holds above
``minimal_drain`` is its bookkeeping columns and the indexes of its other queries
(the pull-forward, a user's jobs), each named with its size.

    flock /tmp/recur-bench.lock .venv/bin/python -m bench.bench_row_bytes [--rows 2000000]
"""

from __future__ import annotations

import argparse
from typing import Any

from bench.private_env import PrivateEnv, pg
from bench.results_io import write_result
from scheduler.store.schema import secondary_indexes

ENVIRONMENT = PrivateEnv("rowbytes")
SCHEMA = ENVIRONMENT.schema
#: The seed's generated rows in SQL (spark/generate.py's shapes, not its hashes).
ROWS = """
SELECT 'gen-1-' || i AS job_key,
       CASE WHEN i % 20 < 14 THEN 'short' WHEN i % 20 < 19 THEN 'medium' ELSE 'long' END
           AS bucket,
       '["' || md5(floor(power(((i::bigint * 7919) % {rows})::float8 / {rows}, 2)
                         * ({rows} / 10))::text)::uuid::text
           || '",{{"n":' || i || ',"data":"' || substr(md5(i::text) || md5((i + 1)::text),
                                                       1 + i % 7, 4 + i % 61) || '"}}'
           || CASE WHEN i % 10 < 3 THEN ',"sms"' ELSE '' END || ']' AS args,
       now() + ((i::bigint * 7919) % {rows}) * (3600.0 / {rows}) * interval '1 second'
           AS due_at
FROM generate_series(1, {rows}) AS i
"""


def sizes(table: str, rows: int) -> dict[str, Any]:
    """Bytes per row of ``table``'s heap and of each of its indexes, the primary key
    rebuilt (packed) first: rows arrive in no key order, which leaves it as loose as
    chance has it, the same for every table."""
    pg(f"REINDEX INDEX {SCHEMA}.{table}_pkey")
    pg(f"VACUUM ANALYZE {SCHEMA}.{table}")
    (heap,), = pg(f"SELECT pg_relation_size('{SCHEMA}.{table}')")
    indexes = pg(f"SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) FROM "
                 f"pg_index WHERE indrelid = '{SCHEMA}.{table}'::regclass ORDER BY 1")
    by = {"heap": round(int(heap) / rows, 1),
          **{name.rsplit(".", 1)[-1]: round(int(b) / rows, 1) for name, b in indexes}}
    return {"bytes_per_job": round(sum(by.values()), 1), "by_relation": by}


def load_recur(rows: int) -> dict[str, Any]:
    """The migrated due_jobs, loaded as the seed loads an empty store (secondary
    indexes dropped, rows in, indexes built: scheduler/store/bulk_indexes.py)."""
    for name in secondary_indexes():
        pg(f"DROP INDEX IF EXISTS {SCHEMA}.{name}")
    pg(f"INSERT INTO {SCHEMA}.due_jobs (job_key, task_id, bucket, args, due_at) "
       f"SELECT job_key, 1, bucket, args, due_at FROM ({ROWS.format(rows=rows)}) AS r")
    for statement in secondary_indexes().values():
        pg(f"SET search_path = {SCHEMA}; {statement}")
    return sizes("due_jobs", rows)


def load_minimal(rows: int, table: str, drain_index: bool) -> dict[str, Any]:
    pg(f"CREATE TABLE {SCHEMA}.{table} (job_key text PRIMARY KEY, bucket text NOT NULL, "
       f"due_at timestamptz NOT NULL, args text NOT NULL)")
    pg(f"INSERT INTO {SCHEMA}.{table} SELECT job_key, bucket, due_at, args FROM "
       f"{SCHEMA}.due_jobs")
    if drain_index:
        pg(f"CREATE INDEX {table}_drain ON {SCHEMA}.{table} (bucket, due_at) "
           f"WITH (fillfactor = 100)")
    return sizes(table, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    args = parser.parse_args()
    if args.rows < 1000:
        parser.exit(2, "recur: --rows must be at least 1000\n")
    ENVIRONMENT.activate()
    ENVIRONMENT.setup()
    try:
        recur = load_recur(args.rows)
        least = load_minimal(args.rows, "minimal_drain", drain_index=True)
        bare = load_minimal(args.rows, "minimal", drain_index=False)
        (avg_args, avg_key), = pg(f"SELECT avg(octet_length(args)), avg(octet_length(job_key))"
                                  f" FROM {SCHEMA}.due_jobs")
    finally:
        ENVIRONMENT.teardown()
    extra_heap = round(recur["by_relation"]["heap"] - least["by_relation"]["heap"], 1)
    other = {name: size for name, size in recur["by_relation"].items()
             if name not in ("heap", "due_jobs_pkey", "ix_due_jobs_scheduled")}
    write_result("row_bytes", {
        "command": f"python -m bench.bench_row_bytes --rows {args.rows}",
        "rows": args.rows,
        "average_bytes": {"args": round(float(avg_args), 1), "job_key": round(float(avg_key), 1)},
        "recur": recur, "minimal_drain": least, "minimal": bare,
        "recur_above_minimal_drain": {
            "total": round(recur["bytes_per_job"] - least["bytes_per_job"], 1),
            "bookkeeping_columns_in_heap": extra_heap,
            "other_indexes": other},
        "goal": "<= 250 bytes per waiting job with UUID users and every index (#26)",
    })


if __name__ == "__main__":
    main()
