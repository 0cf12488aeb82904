"""The seed job against real PostgreSQL and SQLite, in Spark local mode."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from config.errors import SchemaOutOfDate
from config.settings import load_settings
from scheduler.store.bulk import APPLICATION_NAME, BulkResult
from scheduler.store.connection import libpq_url
from scheduler.store.schema import secondary_indexes
from spark.generate import generate
from spark.job import SeedReport, run_seed
from spark.options import parse_options
from spark.session import ARROW_BATCH_BYTES, UNMEASURED, unmeasured_arrow_batches
from spark.transform import Rules, check

START = datetime(2026, 3, 1, tzinfo=UTC)
RULES = Rules.from_settings(load_settings({}))


def seed(spark: SparkSession, tmp_path: Path, *argv: str) -> SeedReport:
    opts = parse_options([*argv, "--rejects", str(tmp_path / "rejects"),
                          "--start", START.isoformat()])
    return run_seed(spark, opts, emit=lambda _line: None)


def pg_rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(libpq_url(url)) as conn:
        return conn.execute(sql).fetchall()


def read_rejects(path: Path) -> list[dict[str, str]]:
    return [json.loads(line) for part in sorted(path.glob("part-*"))
            for line in part.read_text().splitlines()]


def test_arrow_batches_go_unmeasured_only_inside_the_block(
        spark_session: SparkSession) -> None:
    before = spark_session.conf.get(ARROW_BATCH_BYTES)
    assert before != UNMEASURED
    with pytest.raises(RuntimeError), unmeasured_arrow_batches(spark_session):
        assert spark_session.conf.get(ARROW_BATCH_BYTES) == UNMEASURED
        raise RuntimeError("the block failed")
    assert spark_session.conf.get(ARROW_BATCH_BYTES) == before


def test_100k_generated_rows_seed_postgres_once_however_often_run(
        spark_session: SparkSession, fresh_pg_url: str, tmp_path: Path) -> None:
    argv = ("--generate", "100000", "--seed", "5", "--spread", "2h",
            "--database-url", fresh_pg_url, "--max-connections", "2")
    cap = spark_session.conf.get(ARROW_BATCH_BYTES)
    report = seed(spark_session, tmp_path, *argv)
    assert (report.read, report.loaded, report.rejected, report.present) == (100_000, 100_000,
                                                                             0, 0)
    assert not (tmp_path / "rejects").exists(), "no rejects: no rejects directory"
    assert spark_session.conf.get(ARROW_BATCH_BYTES) == cap
    generated = check(generate(spark_session, 100_000, 5, 2, RULES.kinds), RULES)
    expected = dict(Counter(r.resolved_bucket for r in generated.select(
        "resolved_bucket").collect()))
    assert dict(pg_rows(fresh_pg_url, "SELECT bucket, count(*) FROM due_jobs GROUP BY 1")) == (
        expected)
    (first, last, seconds, scheduled), = pg_rows(
        fresh_pg_url, "SELECT min(due_at), max(due_at), count(DISTINCT date_trunc('second', "
        "due_at)), count(*) FILTER (WHERE state = 0 AND token = 0) FROM due_jobs")
    assert START <= first < START + timedelta(seconds=5)
    assert START + timedelta(hours=2) - timedelta(seconds=5) < last < START + timedelta(hours=2)
    assert seconds > 7000 and scheduled == 100_000  # ~14 per second, never all at once
    # Loaded into an empty store without its secondary indexes, which were built after:
    # every one is there again, valid (bulk_indexes.py).
    indexes = dict(pg_rows(fresh_pg_url, "SELECT c.relname, i.indisvalid FROM pg_index i "
                           "JOIN pg_class c ON c.oid = i.indexrelid "
                           "WHERE i.indrelid = 'due_jobs'::regclass"))
    assert indexes == dict.fromkeys({"due_jobs_pkey", *secondary_indexes()}, True)

    again = seed(spark_session, tmp_path, *argv)
    assert (again.read, again.loaded, again.present) == (100_000, 0, 100_000)
    assert pg_rows(fresh_pg_url, "SELECT count(*) FROM due_jobs") == [(100_000,)]


def bad_population(path: Path, good: int) -> dict[str, str]:
    """A JSON-lines file with 1 % bad rows of each kind; returns bad line -> field."""
    bad: dict[str, str] = {}
    with path.open("w") as out:
        for i in range(good):
            out.write(json.dumps({"id": f"ok-{i}", "user_id": f"u{i % 97}", "bucket": "short",
                                  "payload": {"i": i}}) + "\n")
            if i % 100:
                continue
            for line, field in (
                    (f'{{"id": "broken-{i}", "user_id": ', "line"),
                    (json.dumps({"id": f"nouser-{i}", "bucket": "short", "payload": 1}),
                     "user_id"),
                    (json.dumps({"id": f"bucket-{i}", "user_id": "u", "bucket": "huge",
                                 "payload": 1}), "bucket"),
                    (json.dumps({"id": f"big-{i}", "user_id": "u", "bucket": "long",
                                 "payload": "x" * 2000}), "payload")):
                out.write(line + "\n")
                bad[line] = field
    return bad


def test_bad_rows_go_to_rejects_with_their_reason_and_good_rows_load(
        spark_session: SparkSession, fresh_pg_url: str, tmp_path: Path) -> None:
    source = tmp_path / "population.jsonl"
    bad = bad_population(source, good=10_000)
    report = seed(spark_session, tmp_path, "--input", str(source),
                  "--database-url", fresh_pg_url)
    assert (report.read, report.loaded, report.rejected, report.present) == (
        10_400, 10_000, 400, 0)
    rejects = read_rejects(tmp_path / "rejects")
    assert {r["source"]: r["field"] for r in rejects} == bad
    assert all(r["reason"].startswith(r["field"] + ": ") for r in rejects)
    keys = {k for (k,) in pg_rows(fresh_pg_url, "SELECT job_key FROM due_jobs")}
    assert keys == {f"ok-{i}" for i in range(10_000)}


def test_a_retried_partition_loads_each_row_once(
        spark_session: SparkSession, fresh_pg_url: str, tmp_path: Path) -> None:
    """A partition that dies after some chunks committed, then runs again in full."""
    import pyarrow as pa

    from scheduler.store.bulk import copy_line, open_bulk, register_task
    from spark.load import COUNT, message_lines, partition_loader

    code = str(register_task(fresh_pg_url, "tasks.process_message"))
    lines = [copy_line((f"r-{i}", code, "short", "{}", "2026-03-01T00:00:00Z"))
             for i in range(300)]
    schema = pa.schema([(name, pa.string()) for name in ("line", "source", "field", "reason")])
    batches = [pa.RecordBatch.from_pydict({"line": lines[i:i + 50], "source": [None] * 50,
                                           "field": [None] * 50, "reason": [None] * 50},
                                          schema=schema)
               for i in range(0, 300, 50)]

    def dying(after: int) -> Any:
        yield from batches[:after]
        raise ConnectionError("executor lost")

    loader = partition_loader(lambda: open_bulk(fresh_pg_url), chunk=100,
                              lines_of=message_lines)
    with pytest.raises(ConnectionError):
        list(loader(dying(after=5)))  # chunks 0-99 and 100-199 committed, 200-249 not
    assert pg_rows(fresh_pg_url, "SELECT count(*) FROM due_jobs") == [(200,)]
    (count,) = [b for b in loader(iter(batches)) if b.column(0)[0].as_py() == COUNT]
    assert (count.column("offered")[0].as_py(), count.column("loaded")[0].as_py()) == (300, 100)
    assert pg_rows(fresh_pg_url, "SELECT count(*) FROM due_jobs") == [(300,)]


def test_concurrent_connections_stay_under_the_cap(
        spark_session: SparkSession, own_pg_database: str, tmp_path: Path) -> None:
    """Counted in a database of its own: other tests' seeds (-n 2) use the same
    application name at the same time."""
    seen: list[int] = []
    done = threading.Event()
    database = own_pg_database.rsplit("/", 1)[1]

    def watch() -> None:
        with psycopg.connect(libpq_url(own_pg_database), autocommit=True) as conn:
            while not done.is_set():
                (count,), = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE "
                                         "application_name = %s AND datname = %s",
                                         (APPLICATION_NAME, database))
                seen.append(count)
                time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        report = seed(spark_session, tmp_path, "--generate", "60000", "--partitions", "6",
                      "--max-connections", "1", "--database-url", own_pg_database)
    finally:
        done.set()
        watcher.join()
    assert report.loaded == 60_000
    assert max(seen) == 1  # 6 partitions on 2 cores, coalesced to one connection


def sqlite_rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    import sqlite3

    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        return conn.execute(sql).fetchall()


def test_small_seed_into_sqlite_from_csv_and_parquet(
        spark_session: SparkSession, sqlite_url: str, tmp_path: Path) -> None:
    rows = [(f"c{i}", f"u{i}", "medium" if i % 2 else None, None if i % 2 else "ping",
             json.dumps({"i": i})) for i in range(500)] + [("bad", "u", "nope", None, "1")]
    table = spark_session.createDataFrame(
        rows, "id string, user_id string, bucket string, kind string, payload string")
    table.write.option("header", True).csv(str(tmp_path / "in.csv"))
    table.withColumn("id", F.concat(F.lit("p"), "id")).write.parquet(str(tmp_path / "in.parquet"))
    for name in ("in.csv", "in.parquet"):
        report = seed(spark_session, tmp_path, "--input", str(tmp_path / name),
                      "--database-url", sqlite_url)
        assert (report.read, report.loaded, report.rejected) == (501, 500, 1)
    again = seed(spark_session, tmp_path, "--input", str(tmp_path / "in.csv"),
                 "--database-url", sqlite_url)
    assert (again.loaded, again.present) == (0, 500)
    assert sqlite_rows(sqlite_url, "SELECT bucket, count(*) FROM due_jobs GROUP BY 1 "
                       "ORDER BY 1") == [("medium", 500), ("short", 500)]
    (due,) = sqlite_rows(sqlite_url, "SELECT min(due_at) FROM due_jobs")[0]
    assert due.startswith("2026-03-01 ")  # SQLAlchemy's naive-UTC text, as the store reads it


def test_seeding_a_store_without_schema_names_the_command(
        spark_session: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(SchemaOutOfDate, match="recur db upgrade"):
        seed(spark_session, tmp_path, "--generate", "10",
             "--database-url", f"sqlite:///{tmp_path / 'empty.sqlite3'}")


def test_bulk_copy_goes_over_to_the_merge_once_a_key_is_taken(fresh_pg_url: str) -> None:
    from scheduler.store.bulk import PostgresBulk, copy_line, register_task

    code = str(register_task(fresh_pg_url, "tasks.process_message"))

    def lines(*keys: str) -> list[str]:
        return [copy_line((k, code, "short", "[]", "2026-03-01T00:00:00Z")) for k in keys]

    with PostgresBulk(fresh_pg_url) as bulk:
        assert isinstance(bulk, PostgresBulk)
        assert bulk.load(lines("a", "b")) == BulkResult(2, 2) and bulk.direct
        assert bulk.load(lines("b", "c", "c")) == BulkResult(3, 1) and not bulk.direct
        assert bulk.load(lines("d")) == BulkResult(1, 1)
    assert sorted(pg_rows(fresh_pg_url, "SELECT job_key FROM due_jobs")) == [
        ("a",), ("b",), ("c",), ("d",)]


def test_two_loaders_with_the_same_keys_in_opposite_orders_load_each_once(
        fresh_pg_url: str) -> None:
    """Direct COPYs that meet each other's uncommitted keys wait, deadlock or hit a
    unique violation; either way the loser goes over to the merge and nothing fails."""
    from scheduler.store.bulk import PostgresBulk, copy_line, register_task

    code = str(register_task(fresh_pg_url, "tasks.process_message"))
    keys = [f"k-{i:05d}" for i in range(6_000)]
    results: dict[str, BulkResult] = {}
    merged: dict[str, bool] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def load(name: str, order: list[str]) -> None:
        try:
            total = BulkResult()
            with PostgresBulk(fresh_pg_url) as bulk:
                assert isinstance(bulk, PostgresBulk)
                start.wait(timeout=30)
                for i in range(0, len(order), 1_500):
                    total += bulk.load([copy_line((k, code, "short", "[]",
                                                   "2026-03-01T00:00:00Z"))
                                        for k in order[i:i + 1_500]])
                merged[name] = not bulk.direct
            results[name] = total
        except BaseException as exc:  # reported below, with the other loader's outcome
            errors.append(exc)

    threads = [threading.Thread(target=load, args=("up", keys)),
               threading.Thread(target=load, args=("down", keys[::-1]))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == [] and set(results) == {"up", "down"}
    assert any(merged.values())  # keys met: at least one went over to the merge
    assert sum(r.offered for r in results.values()) == 12_000
    assert sum(r.loaded for r in results.values()) == 6_000
    assert pg_rows(fresh_pg_url, "SELECT count(*), count(DISTINCT job_key) FROM due_jobs") == [
        (6_000, 6_000)]
