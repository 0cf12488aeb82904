"""``recur status`` at any size: past a cap of rows a bucket, PostgreSQL's counts are
estimates or lower bounds and say so (``~``, ``≥``, ``estimated``/``at_least`` in
--json); ``--exact`` counts every row; SQLite counts exactly; the probes read the
(bucket, due_at) indexes, never the table."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from scheduler.store import DueStore, Job
from scheduler.store import estimate_queries as q
from scheduler.store.estimates import HEAD_CAP, MINUTE_CAP, PROBES_PER_MINUTE
from tests.integration.test_cli_errors import run_recur
from tests.support.scheduler_support import recurring_jobs
from tests.support.store_fixtures import own_pg_schema, run_pg

pytestmark = pytest.mark.services

DUE, LATER, BURST = HEAD_CAP + 200, 3, MINUTE_CAP + 150


@pytest.fixture
def new_pg_url() -> Iterator[str]:
    """A migrated PostgreSQL schema of this test's own: its table never analyzed."""
    with own_pg_schema("recur_status") as (schema, url):
        run_pg(f"ALTER TABLE {schema}.due_jobs SET (autovacuum_enabled = false)")  # no analyze
        yield url


def spread(jobs: list[Job], first: datetime, step: timedelta) -> list[Job]:
    return [replace(j, due_at=first + i * step) for i, j in enumerate(jobs)]


def fill(url: str) -> None:
    """short: DUE rows due for an hour, BURST due within 2 s five minutes ahead; long: 3
    rows due in an hour."""
    now = datetime.now(UTC)
    store = DueStore.open(url)
    try:
        store.schedule(
            spread(recurring_jobs(DUE, now, 60, None, buckets=("short",)),
                   now - timedelta(hours=1), timedelta(milliseconds=500))
            + spread(recurring_jobs(BURST, now, 60, None, buckets=("short",)),
                     now + timedelta(minutes=5), timedelta(milliseconds=5))
            + recurring_jobs(LATER, now + timedelta(hours=1), 60, None, buckets=("long",)),
            now)
    finally:
        store.close()


def status(url: str, cwd: Path, *extra: str) -> dict[str, Any]:
    result = run_recur(["status", "--json", *extra], {"RECUR_DATABASE_URL": url}, cwd)
    assert result.returncode == 0, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def buckets(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["bucket"]: row for row in doc["buckets"]}


def table(url: str, cwd: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    result = run_recur(["status", *extra], {"RECUR_DATABASE_URL": url}, cwd)
    assert result.returncode == 0, result.stderr
    return result


def assert_exact(doc: dict[str, Any]) -> None:
    found = buckets(doc)
    short, long_ = found["short"], found["long"]
    assert (short["scheduled"], short["due_now"]) == (DUE + BURST, DUE)
    assert (long_["scheduled"], long_["due_now"]) == (LATER, 0)
    assert all(not r["estimated"] and not r["at_least"] for r in doc["buckets"])
    assert sum(doc["due_histogram"]["short"]) == BURST
    assert doc["due_histogram_estimated"] == {} and doc["exact"] is True


def test_postgresql_estimates_past_the_cap_and_counts_behind_exact(
        live_services: None, new_pg_url: str, tmp_path: Path) -> None:
    fill(new_pg_url)
    # never analyzed: no estimate to give, so at least the cap
    doc = status(new_pg_url, tmp_path)
    short, long_ = buckets(doc)["short"], buckets(doc)["long"]
    assert doc["exact"] is False and doc["analyzed_at"] is None
    assert (short["scheduled"], short["due_now"]) == (HEAD_CAP, HEAD_CAP)
    assert set(short["at_least"]) == {"scheduled", "due_now"} and short["estimated"] == []
    assert short["lag_seconds"] >= 3600
    assert (long_["scheduled"], long_["due_now"], long_["estimated"], long_["at_least"]) == (
        LATER, 0, [], [])
    minutes = doc["due_histogram_estimated"]["short"]  # the burst's (one, or two)
    assert 1 <= len(minutes) <= 2 and all(
        doc["due_histogram"]["short"][m] >= MINUTE_CAP // PROBES_PER_MINUTE for m in minutes)
    assert_exact(status(new_pg_url, tmp_path, "--exact"))

    run_pg(f"ANALYZE {new_pg_url.rsplit('%3D', 1)[1]}.due_jobs")
    doc = status(new_pg_url, tmp_path)
    short = buckets(doc)["short"]
    assert short["estimated"] == ["scheduled"] and short["at_least"] == ["due_now"]
    assert abs(short["scheduled"] - (DUE + BURST)) <= 0.1 * (DUE + BURST)
    assert doc["analyzed_at"] is not None

    shown = table(new_pg_url, tmp_path).stdout.splitlines()
    line = next(s for s in shown if s.startswith("short")).split()
    assert re.fullmatch(r"~\d+", line[1]) and line[2] == f"≥{HEAD_CAP}"
    assert next(s for s in shown if s.startswith("long")).split()[1:3] == [str(LATER), "0"]
    assert any(s.startswith("~: an estimate") for s in shown)
    burst = next(s for s in shown if s.startswith("due per minute, next 10 min, short"))
    assert re.search(r" ~\d+ ", burst)
    exact = table(new_pg_url, tmp_path, "--exact").stdout.splitlines()
    assert next(s for s in exact if s.startswith("short")).split()[1:3] == [
        str(DUE + BURST), str(DUE)]
    assert not any("~" in s or "≥" in s for s in exact)


def test_sqlite_counts_exactly_with_or_without_exact(live_services: None, sqlite_url: str,
                                                     tmp_path: Path) -> None:
    fill(sqlite_url)
    assert_exact(status(sqlite_url, tmp_path))
    assert_exact(status(sqlite_url, tmp_path, "--exact"))


def _plan(url: str, stmt: Any, params: dict[str, Any]) -> str:
    """PostgreSQL's plan for ``stmt`` with ``params``, as text."""
    store = DueStore.open(url)
    try:
        compiled = stmt.compile(dialect=store.engine.dialect)
        with store.engine.connect() as conn:
            rows = conn.exec_driver_sql("EXPLAIN " + str(compiled),
                                        compiled.construct_params(params)).scalars()
            return "\n".join(rows)
    finally:
        store.close()


@pytest.mark.parametrize("which", ["head", "minutes"])
def test_the_probes_read_the_due_time_indexes_not_the_table(
        which: str, live_services: None, new_pg_url: str) -> None:
    fill(new_pg_url)
    run_pg(f"ANALYZE {new_pg_url.rsplit('%3D', 1)[1]}.due_jobs")
    now = datetime.now(UTC)
    stmt, params = ((q.HEAD_PROBE, {"bucket": "short", "now": now, "cap": HEAD_CAP})
                    if which == "head" else
                    (q.WINDOW_PROBES, {"bucket": "short", "t0": now, "width": 15.0,
                                       "windows": 40, "cap": MINUTE_CAP // PROBES_PER_MINUTE}))
    plan = _plan(new_pg_url, stmt, params)
    assert "ix_due_jobs_scheduled" in plan and "ix_due_jobs_dealt_due" in plan, plan
    assert "Seq Scan" not in plan and "ix_due_jobs_early" not in plan, plan
