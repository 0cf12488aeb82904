"""The statements the store hands its drivers as plain text, each named once.

Connection set-up (SQLite's pragmas and write lock, PostgreSQL's commit mode), the
seed's COPY path, the fill locks' advisory locks and the doctor's reads of the
server's settings. The due-jobs statements proper are in ``queries.py``.
"""

from __future__ import annotations

#: Milliseconds a SQLite writer waits for the lock before giving up.
SQLITE_BUSY_MS = 30_000

# -- connections --------------------------------------------------------------------
#: sqlite_session: WAL (workers and the scheduler write one file), a busy timeout.
SQLITE_SESSION = ("PRAGMA journal_mode=WAL", f"PRAGMA busy_timeout={SQLITE_BUSY_MS}",
                  "PRAGMA synchronous=NORMAL")
#: sqlite_begin: take the write lock at the start, not half-way on an upgrade.
SQLITE_BEGIN = "BEGIN IMMEDIATE"
#: sqlite_try_write: whether the file can be written: its header's user_version written
#: as it is, in a transaction rolled back (schema_check.sqlite_unwritable).
SQLITE_USER_VERSION = "PRAGMA user_version"
SQLITE_SET_USER_VERSION = "PRAGMA user_version = {version:d}"
SQLITE_ROLLBACK = "ROLLBACK"
#: settle_session: the worker's per-job writes do not wait for the WAL flush
#: (the settle journal covers them).
SETTLE_SESSION = "SET synchronous_commit TO off"
#: durable_transaction: a transaction on such a connection that does wait.
DURABLE_TRANSACTION = "SET LOCAL synchronous_commit TO on"

# -- the seed's bulk path -----------------------------------------------------------
# The loader's session: room to sort a chunk and hold the staging table in
# memory (the defaults, 4 MB and 8 MB, spill a 100,000-row chunk to disk), and
# commits that do not wait for the WAL flush: ``make_durable`` waits once for
# all of them before the loader reports its counts.
BULK_SESSION = ("SET work_mem = '64MB'", "SET temp_buffers = '64MB'",
                "SET synchronous_commit = off")
# Session-private staging table; every commit empties it.
CREATE_STAGE = """
CREATE TEMPORARY TABLE IF NOT EXISTS recur_seed_stage (
    job_key text, task_id smallint, bucket text, args text, due_at timestamptz
) ON COMMIT DELETE ROWS
"""
BULK_COLUMNS = "(job_key, task_id, bucket, args, due_at)"
COPY_DIRECT = f"COPY due_jobs {BULK_COLUMNS} FROM STDIN"
COPY_STAGE = f"COPY recur_seed_stage {BULK_COLUMNS} FROM STDIN"
# The idempotent merge. Key order makes two loaders that share keys lock them
# in the same order (no deadlock) and walks the primary key index in order.
MERGE_STAGE = f"""
INSERT INTO due_jobs {BULK_COLUMNS}
SELECT job_key, task_id, bucket, args, due_at FROM recur_seed_stage ORDER BY job_key
ON CONFLICT (job_key) DO NOTHING
"""
#: make_durable: a commit that waits for the WAL flush covers every earlier one.
SYNC_COMMIT_ON = "SET synchronous_commit = on"
TOUCH_TRANSACTION = "SELECT txid_current()"

# -- the fill locks (scheduler/store/fill_lock.py) ----------------------------------
#: Lanes per scheduler a mark's key tells apart (the lane number is taken modulo this).
LANE_SLOTS = 64
#: Longest wait for the fill lock: it is held for milliseconds; a longer wait is a
#: stuck holder, and the lane dispatches nothing this pass rather than wait on.
LOCK_TIMEOUT = "5s"
SET_LOCK_TIMEOUT = f"SET lock_timeout = '{LOCK_TIMEOUT}'"
# fill_lock: the bucket's fill lock, one bigint key.
FILL_LOCK = "SELECT 1 FROM pg_advisory_lock(hashtext(current_schema() || ':' || %(fill)s))"
FILL_UNLOCK = "SELECT pg_advisory_unlock(hashtext(current_schema() || ':' || %(fill)s))"
# in_flight: batches marked in flight on the bucket, by every scheduler.
IN_FLIGHT = ("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
             "AND objsubid = 2 AND database = (SELECT oid FROM pg_database "
             "WHERE datname = current_database()) "
             "AND classid = hashtext(current_schema() || ':' || %(mark)s)::oid")
# mark / unmark: one lane's batch in flight (two int4 keys: bucket, backend pid and lane).
MARK = ("SELECT 1 FROM pg_advisory_lock(hashtext(current_schema() || ':' || %(mark)s), "
        "pg_backend_pid() * " + str(LANE_SLOTS) + " + %(lane)s)")
UNMARK = ("SELECT pg_advisory_unlock(hashtext(current_schema() || ':' || %(mark)s), "
          "pg_backend_pid() * " + str(LANE_SLOTS) + " + %(lane)s)")

# -- the doctor's reads -------------------------------------------------------------
#: show_setting: one server setting as this role sees it (``name`` is ours, never input).
SHOW_SETTING = "SHOW {name}"
#: table_options: the storage options of recur's tables in the current schema.
TABLE_OPTIONS = ("SELECT relname, reloptions FROM pg_class WHERE relname = ANY(:names) "
                 "AND relnamespace = to_regnamespace(current_schema())")

# -- recur status -------------------------------------------------------------------
#: table_statistics: whether due_jobs has statistics on its bucket column (ANALYZE ran
#: on it) and when it was last analyzed (estimate_queries.py; status_sql.py for psycopg).
TABLE_STATISTICS = (
    "SELECT EXISTS (SELECT 1 FROM pg_stats s WHERE s.schemaname = n.nspname"
    " AND s.tablename = c.relname AND s.attname = 'bucket'),"
    " greatest(t.last_analyze, t.last_autoanalyze)"
    " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
    " LEFT JOIN pg_stat_all_tables t ON t.relid = c.oid"
    " WHERE c.oid = to_regclass('due_jobs')")
