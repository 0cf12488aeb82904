"""The seed's jitter: first due times on each key's phase, the worker's own arithmetic."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from pyspark.sql import SparkSession

from routing.jitter import first_due
from spark.generate import generate
from spark.load import due_jobs
from spark.options import parse_options
from tests.unit.test_transform import START, checked, msg

EVERY, JITTER = 600.0, 0.75


def seeded(spark: SparkSession, count: int) -> dict[str, datetime]:
    docs = [msg(id=f"user-{i}/job", user_id="u", bucket="short", payload=i) for i in range(count)]
    rows = due_jobs(checked(spark, docs), START, 3600, (EVERY, JITTER)).collect()
    return {r.job_key: r.due_at.replace(tzinfo=UTC) for r in rows}


def test_seeded_due_times_are_the_workers_slots(spark_session: SparkSession) -> None:
    first = seeded(spark_session, 3000)
    assert first == seeded(spark_session, 3000)  # seeding twice: the same times
    for key, due in first.items():
        expected = first_due(key, EVERY, JITTER, START.timestamp())
        assert abs(due.timestamp() - expected) < 2e-6, key
    # Spread over jitter x every of the interval, evenly: no tenth holds much more.
    offsets = [(d - START).total_seconds() for d in first.values()]
    assert all(0 <= o < EVERY for o in offsets)
    tenths = [sum(1 for o in offsets if int(o // (EVERY * JITTER / 10)) == t) for t in range(10)]
    assert min(tenths) > 0.8 * 300 and max(tenths) < 1.2 * 300


def test_generated_payloads_carry_their_jitter(spark_session: SparkSession) -> None:
    rows = generate(spark_session, 3, 1, 1, {}, every=60, runs=None, jitter=0.5).collect()
    assert all(json.loads(r.payload)["jitter"] == 0.5 for r in rows)
    plain = generate(spark_session, 3, 1, 1, {}, every=60).collect()
    assert all("jitter" not in json.loads(r.payload) for r in plain)


def test_jitter_options() -> None:
    opts = parse_options(["--generate", "10", "--every", "1m", "--jitter", "0.5"])
    assert opts.phased == (60.0, 0.5)
    assert parse_options(["--generate", "10", "--every", "1m"]).phased is None
    assert parse_options(["--generate", "10", "--every", "1m", "--jitter", "0"]).phased is None
    for argv in (["--generate", "10", "--jitter", "0.5"],
                 ["--generate", "10", "--every", "1m", "--jitter", "1.5"]):
        with pytest.raises(SystemExit):
            parse_options(argv)
