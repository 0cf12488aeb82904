"""Rows dealt into rounds leave the drain index: every statement that read scheduled rows
through it still reads an index (the drain index, or the dealt rows' own), on
PostgreSQL with many rows and on SQLite: the plans, read with EXPLAIN."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from sqlalchemy import event, true

from scheduler.fair_share import FairShare
from scheduler.store import DueStore
from scheduler.store import fair_queries as fq
from scheduler.store import operator_queries as oq
from scheduler.store import queries as q
from scheduler.store.control import JobControl, JobFilter
from scheduler.store.due_histogram import histogram_statement
from scheduler.store.fair import FairRows
from tests.support.store_fixtures import PG_DSN, PG_SCHEMA

NOISY, OTHERS, FUTURE = 20_000, 1_000, 150_000


def seed(store: DueStore) -> datetime:
    """A noisy user's backlog, other users behind it, a future population; one look."""
    now = datetime.now(UTC)
    sql = ("INSERT INTO due_tasks (name) VALUES ('tasks.process_message') ON CONFLICT DO NOTHING;"
           "INSERT INTO due_jobs (job_key, task_id, bucket, args, due_at) SELECT 'n' || i, 1, "
           "'short', '[\"noisy\",null]', {ago10} FROM {series}(1, {noisy}) AS s(i);"
           "INSERT INTO due_jobs (job_key, task_id, bucket, args, due_at) SELECT 'o' || i, 1, "
           "'short', '[\"user-' || i || '\",null]', {ago5} FROM {series}(1, {others}) AS s(i);"
           "INSERT INTO due_jobs (job_key, task_id, bucket, args, due_at) SELECT 'f' || i, 1, "
           "'short', '[\"user-' || (i % 997) || '\",null]', {later} FROM {series}(1, {future}) "
           "AS s(i)")
    if store.dialect == "postgresql":
        text = sql.format(series="generate_series", ago10="now() - interval '10 s'",
                          ago5="now() - interval '5 s'", later="now() + i * interval '1 s'",
                          noisy=NOISY, others=OTHERS, future=FUTURE)
        with psycopg.connect(PG_DSN, autocommit=True,
                             options=f"-csearch_path={PG_SCHEMA}") as conn:
            for statement in text.split(";"):
                conn.execute(statement)
            conn.execute("ANALYZE due_jobs")
    else:
        text = sql.format(series="generate_series", ago10="datetime('now', '-10 seconds')",
                          ago5="datetime('now', '-5 seconds')",
                          later="datetime('now', '+' || i || ' seconds')",
                          noisy=NOISY // 10, others=OTHERS // 10, future=FUTURE // 10)
        with store.engine.begin() as conn:
            for statement in text.split(";"):
                conn.exec_driver_sql(_sqlite_series(statement))
    fair = FairShare(FairRows(store), enabled=True, quota=100)
    assert fair.look("short", now + timedelta(seconds=1)) > 0
    return now + timedelta(seconds=1)


def _sqlite_series(statement: str) -> str:
    """SQLite has no generate_series by default: a recursive CTE instead."""
    if "generate_series" not in statement:
        return statement
    head, _, tail = statement.partition("FROM generate_series(1, ")
    count, _, rest = tail.partition(") AS s(i)")
    return (f"WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < "
            f"{count}) " + head + "FROM s" + rest)


#: Statement -> the index it must read (the drain index, or a dealt rows' one).
DRAIN, ROUNDS, BY_DUE = "ix_due_jobs_scheduled", "ix_due_jobs_dealt ", "ix_due_jobs_dealt_due"


def statements(store: DueStore, now: datetime) -> dict[str, tuple[Any, dict[str, Any], str]]:
    plan = JobControl(store).walk_of(JobFilter(bucket="short", state="scheduled"), None)
    b = {"bucket": "short"}
    edges = {f"t{i}": now + timedelta(minutes=i) for i in range(11)}
    return {
        "claim due": (q.CLAIM_DUE, {**b, "now": now, "limit": 1000}, DRAIN),
        "claim dealt": (fq.CLAIM_DEALT, {**b, "now": now, "limit": 1000}, ROUNDS),
        "oldest": (q.OLDEST_SCHEDULED, b, DRAIN),
        "oldest dealt": (fq.OLDEST_DEALT, b, BY_DUE),
        "due capped": (q.DUE_CAPPED, {**b, "now": now, "cap": 1000}, DRAIN),
        "dealt capped": (fq.DEALT_CAPPED, {**b, "cap": 1000}, "ix_due_jobs_dealt"),
        "lowest round": (fq.LOWEST_ROUND, b, ROUNDS),
        "highest round": (fq.HIGHEST_ROUND, b, ROUNDS),
        "window": (fq.window(store.dialect), {**b, "now": now, "start": now - timedelta(
            minutes=1), "limit": 2000}, DRAIN),
        "dealt users": (fq.dealt_users(store.dialect), {**b, "limit": 2000}, ROUNDS),
        "list scheduled": (fq.scheduled_in_due_order(true(), plan.bound, plan.order, 50), {},
                           BY_DUE),
        "histogram": (histogram_statement(10).params(**edges, buckets=["short"]), {}, DRAIN),
        "scheduled buckets": (oq.SCHEDULED_BUCKETS, {}, "ix_due_jobs_early"),
        # Writes: the pick reads the index (the join back by key is the planner's choice).
        "set aside due": (oq.set_aside_rows("short", now, 1000, now), {}, DRAIN),
        "set aside dealt": (oq.set_aside_rows("short", now, 1000, now, dealt=True), {},
                            "ix_due_jobs_dealt"),
        "undeal": (fq.undeal("short", 1000), {}, "ix_due_jobs_dealt"),
    }


def plans(store: DueStore, stmt: Any, params: dict[str, Any]) -> str:
    """The plan of ``stmt`` as the store sends it (its own parameter processing): the
    statement text is prefixed with EXPLAIN on its way to the driver."""
    prefix = "EXPLAIN " if store.dialect == "postgresql" else "EXPLAIN QUERY PLAN "

    def explain(conn: Any, cursor: Any, text: str, parameters: Any, context: Any,
                executemany: bool) -> tuple[str, Any]:
        return prefix + text, parameters

    with store.engine.connect() as conn:
        event.listen(conn, "before_cursor_execute", explain, retval=True)
        result = conn.execute(stmt, params)
        rows = result.cursor.fetchall()
        conn.rollback()
    return "\n".join(str(r[0] if store.dialect == "postgresql" else r[-1]) for r in rows)


def analyze(store: DueStore) -> None:
    """What autovacuum's autoanalyze does once enough rows changed."""
    with store.engine.begin() as conn:
        conn.exec_driver_sql("ANALYZE due_jobs" if store.dialect == "postgresql" else "ANALYZE")


def test_every_reading_of_scheduled_rows_uses_an_index(store: DueStore) -> None:
    now = seed(store)
    # The claims, before the statistics know of any dealt row (the hot path never
    # depends on them): each its own index.
    for name in ("claim due", "claim dealt"):
        stmt, params, index = statements(store, now)[name]
        assert index.strip() in plans(store, stmt, params), name
    analyze(store)
    for name, (stmt, params, index) in statements(store, now).items():
        plan = plans(store, stmt, params)
        assert index.strip() in plan, f"{name}: not {index}:\n{plan}"
        if name.startswith(("set aside", "undeal")):
            continue
        if store.dialect == "postgresql":
            assert "Seq Scan on due_jobs" not in plan, f"{name}:\n{plan}"
        else:
            assert not any(line.startswith("SCAN due_jobs") for line in plan.splitlines()), \
                f"{name}:\n{plan}"


@pytest.mark.parametrize("store_url", ["postgresql"], indirect=True)
def test_the_deal_probes_the_primary_key(store: DueStore) -> None:
    now = seed(store)
    keys = [f"o{i}" for i in range(1, 6)]
    plan = plans(store, fq.DEAL_ROWS_PG, {"keys": keys, "turns": [1] * len(keys)})
    assert "Seq Scan on due_jobs" not in plan and "due_jobs_pkey" in plan, plan
    assert now
