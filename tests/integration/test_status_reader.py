"""``recur status`` on PostgreSQL reads the store on psycopg alone (StatusReader): the
same values DueStore reads, no SQLAlchemy imported, and a store it cannot use is one
``recur: …`` line with exit code 2, the broker and Redis still reported."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from config.buckets_in_use import bucket_table
from scheduler.store import DueStore
from scheduler.store.control import JobControl
from scheduler.store.due_histogram import MINUTES_AHEAD
from scheduler.store.estimates import bounded_histogram, bounded_stats
from scheduler.store.fair import FairRows
from scheduler.store.status_reader import StatusReader
from tests.integration.test_cli_errors import error_lines, run_recur
from tests.integration.test_status_cli import run_python
from tests.support.scheduler_support import recurring_jobs
from tests.support.store_fixtures import own_pg_schema, run_pg

pytestmark = pytest.mark.services


@pytest.fixture
def schema_url() -> Iterator[tuple[str, str]]:
    """A migrated PostgreSQL schema of this test's own, and its URL."""
    with own_pg_schema("recur_reader") as found:
        yield found


def fill(schema: str, url: str, now: datetime) -> None:
    """Rows of every kind status reads: due and later (spread over the histogram's
    minutes), in flight and run out, set aside, dealt into rounds; counters; a pause."""
    jobs = recurring_jobs(400, now, 60, None, buckets=("short", "long", "stray"))
    store = DueStore.open(url)
    try:
        store.schedule([replace(j, due_at=now + timedelta(seconds=3 * i - 300))
                        for i, j in enumerate(jobs)], now)
        JobControl(store).pause("long", now - timedelta(minutes=3))
    finally:
        store.close()
    s = schema
    run_pg(f"UPDATE {s}.due_jobs SET state = 1, due_at = due_at + interval '10 minutes' "
        f"WHERE job_key IN (SELECT job_key FROM {s}.due_jobs ORDER BY job_key LIMIT 30)")
    run_pg(f"INSERT INTO {s}.due_set_aside SELECT job_key, bucket, 'refused', now() FROM "
        f"{s}.due_jobs WHERE state = 0 ORDER BY job_key DESC LIMIT 7")
    run_pg(f"UPDATE {s}.due_jobs SET state = 2 WHERE job_key IN (SELECT job_key FROM "
        f"{s}.due_set_aside)")
    run_pg(f"UPDATE {s}.due_jobs SET turn = 1 + abs(hashtext(job_key)) % 2 WHERE job_key IN "
        f"(SELECT job_key FROM {s}.due_jobs WHERE state = 0 AND bucket = 'short' AND "
        f"due_at < now() ORDER BY job_key LIMIT 20)")
    run_pg(f"INSERT INTO {s}.due_counters VALUES ('short', 'leases_recovered', 4), "
        f"('long', 'dead_lettered', 2), ('short', 'fair_dealt', 20)")
    run_pg(f"ANALYZE {s}.due_jobs")


@pytest.mark.parametrize("cap", [8, 5_000], ids=["capped", "exact"])
def test_the_reader_reads_what_due_store_reads(schema_url: tuple[str, str], cap: int) -> None:
    schema, url = schema_url
    now = datetime.now(UTC)
    fill(schema, url, now)
    names = [*bucket_table().names, "stray"]
    store, reader = DueStore.open(url), StatusReader.open(url)
    try:
        mine = reader.stats(names, now, cap)
        theirs = bounded_stats(store, names, now, cap)
        assert mine == theirs
        assert mine.exact is (cap > 400) and mine.buckets["short"].dispatched > 0
        assert (reader.histogram(names, now, MINUTES_AHEAD, cap)
                == bounded_histogram(store, names, now, MINUTES_AHEAD, cap))
        assert reader.paused() == JobControl(store).paused() != {}
        for bucket in names:
            assert (reader.fair_state(bucket, now, cap, cap)
                    == FairRows(store).state(bucket, now, cap, cap))
        assert reader.fair_state("short", now, cap, cap).dealt_rows > 0
    finally:
        store.close()
        reader.close()


def test_status_on_postgresql_imports_no_sqlalchemy(schema_url: tuple[str, str],
                                                    tmp_path: Path) -> None:
    schema, url = schema_url
    fill(schema, url, datetime.now(UTC))
    probe = ("import sys\nfrom config.entry import main\ntry:\n    main(sys.argv[1:])\n"
             "except SystemExit:\n    pass\nprint('LOADED', sorted(m for m in sys.modules "
             "if m.split('.')[0] in {'sqlalchemy', 'alembic'}), file=sys.stderr)\n")
    alone = run_python(["-c", probe, "status", "--json"], {"RECUR_DATABASE_URL": url},
                       tmp_path)
    assert alone.returncode == 0, alone.stderr
    assert "LOADED []" in alone.stderr.splitlines(), alone.stderr
    doc = json.loads(alone.stdout)
    assert doc["paused"] == ["long"] and doc["fair_share"]["short"]["dealt_ever"] == 20


@pytest.mark.parametrize("damage", ["old revision", "index missing"])
def test_a_store_it_cannot_use_is_one_line_and_the_rest_is_read(
        schema_url: tuple[str, str], damage: str, tmp_path: Path, live_services: None) -> None:
    schema, url = schema_url
    if damage == "old revision":
        run_pg(f"UPDATE {schema}.recur_schema_version SET version_num = '0001'")
    else:
        run_pg(f"DROP INDEX {schema}.ix_due_jobs_dealt_due")
    result = run_recur(["status", "--json"], {"RECUR_DATABASE_URL": url}, tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    doc = json.loads(result.stdout)
    assert error_lines(result) == [f"recur: {e}" for e in doc["errors"]]
    assert len(doc["errors"]) == 1 and "recur db upgrade" in doc["errors"][0]
    assert ("ix_due_jobs_dealt_due" in doc["errors"][0]) is (damage == "index missing")
    assert all(r["scheduled"] is None and r["queue_depth"] is not None
               for r in doc["buckets"])  # the store unread, the broker read
