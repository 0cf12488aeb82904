"""The seed job's entry points (``recur seed``, ``spark-submit``) and its broker sink."""

from __future__ import annotations

import os
import sqlite3
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from kombu import Connection
from pyspark.sql import SparkSession

from config.buckets_in_use import BUCKETS
from config.settings import load_settings
from routing.broker import queue_depth
from spark.generate import generate
from spark.job import run_seed
from spark.options import parse_options
from spark.transform import Rules, check
from tests.support.processes import recur_argv, spawn, wait_for
from tests.support.services import ROOT

pytestmark = pytest.mark.services
RULES = Rules.from_settings(load_settings({}))


def run_to_end(tmp_path: Path, name: str, argv: list[str], env: dict[str, str]) -> str:
    """Run a child to its end (killed if it overruns); return its output."""
    child = spawn(name, argv, tmp_path / "logs", env, cwd=ROOT)
    try:
        child.proc.wait(timeout=240)
    finally:
        child.stop()
    assert child.proc.returncode == 0, child.log()[-3000:]
    return child.log()


def count_rows(sqlite_url: str) -> int:
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as conn:
        return int(conn.execute("SELECT count(*) FROM due_jobs").fetchone()[0])


def test_recur_seed_command(sqlite_url: str, tmp_path: Path) -> None:
    out = run_to_end(tmp_path, "recur-seed", recur_argv(
        "seed", "--generate", "400", "--database-url", sqlite_url, "--master", "local[1]",
        "--rejects", str(tmp_path / "rejects")), dict(os.environ))
    assert "seed: read 400, loaded 400, rejected 0, already present 0 (store)" in out
    assert count_rows(sqlite_url) == 400


def test_spark_submit_runs_the_same_job(sqlite_url: str, tmp_path: Path) -> None:
    submit = str(Path(sys.executable).parent / "spark-submit")
    out = run_to_end(tmp_path, "spark-submit", [
        submit, "--master", "local[1]", str(ROOT / "spark" / "seed_job.py"),
        "--generate", "300", "--database-url", sqlite_url,
        "--rejects", str(tmp_path / "rejects")], {**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert "seed: read 300, loaded 300, rejected 0, already present 0 (store)" in out
    assert count_rows(sqlite_url) == 300


def test_broker_sink_publishes_every_message_to_its_bucket_queue(
        spark_session: SparkSession, broker: Connection, celery_app: Any,
        tmp_path: Path) -> None:
    opts = parse_options(["--generate", "600", "--seed", "9", "--sink", "broker",
                          "--batch", "100", "--max-connections", "2",
                          "--rejects", str(tmp_path / "rejects")])
    report = run_seed(spark_session, opts, emit=lambda _line: None)
    assert (report.read, report.loaded, report.rejected) == (600, 600, 0)
    generated = check(generate(spark_session, 600, 9, 2, RULES.kinds), RULES)
    expected = Counter(r.resolved_bucket for r in generated.select("resolved_bucket").collect())
    try:
        wait_for(lambda: {b.queue: queue_depth(broker, b.queue) for b in BUCKETS} == {
            b.queue: expected[b.name] for b in BUCKETS}, 20, "every seeded message queued")
    finally:
        with broker.channel() as channel:
            for bucket in BUCKETS:
                channel.queue_purge(bucket.queue)
