"""Hostile seed inputs: every bad row is a reject naming its field (or the whole input is
refused with one line); every valid row loads; a bad invocation is refused before Spark.

The rows of each format go through one seed (Spark runs are slow): JSON lines, CSV,
Parquet, each into a fresh PostgreSQL store, where a row PostgreSQL cannot take fails
a COPY or an index build.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from config.errors import SeedInputError
from scheduler.store.connection import libpq_url
from spark.job import SeedReport, run_seed
from spark.options import parse_options
from tests.support import services
from tests.support.processes import recur_argv
from tests.support.refusals import refusal_line, service_environment

pytestmark = pytest.mark.services


def row(key: str, **fields: Any) -> dict[str, Any]:
    return {"id": key, "user_id": "u", "bucket": "short", "payload": 1, **fields}


def line(key: str, **fields: Any) -> bytes:
    return json.dumps(row(key, **fields)).encode()


#: (the line as written, the field it is refused for: None when valid)
JSON_LINES: list[tuple[bytes, str | None]] = [
    (line("good-plain"), None),
    (line("good-every", payload={"every": 60, "runs": 3, "jitter": 0.5}), None),
    (line("good-due", due_at="2026-12-01T08:00:00Z"), None),
    (line("good-bracket", payload=[1, "]", {"a": "]"}]), None),
    (line("good-words", payload="Infinity"), None),
    (line("good-big", payload={"n": 1e300}), None),
    (line("good-dup"), None),
    (line("good-dup", payload={"second": True}), None),  # already present: documented
    (b'{"id": "bad-\xff", "user_id": "u", "bucket": "short", "payload": 1}', "line"),
    (b'{"id": "nul\x00", "user_id": "u", "bucket": "short", "payload": 1}', "line"),
    (b'{"id": "s\\ud800", "user_id": "u", "bucket": "short", "payload": 1}', "line"),
    (line("bad-huge-payload", payload="x" * (1 << 20)), "payload"),
    (line("x" * (1 << 20)), "id"),
    (line("bad-neg", payload={"every": -5}), "payload.every"),
    (line("bad-text-every", payload={"every": "5"}), "payload.every"),
    (line("bad-no-every", payload={"runs": 3}), "payload.every"),
    (line("bad-huge-every", payload={"every": 1e300}), "payload.every"),
    (line("bad-runs", payload={"every": 60, "runs": 1.5}), "payload.runs"),
    (line("bad-jitter", payload={"every": 60, "jitter": 2}), "payload.jitter"),
    (b'{"id": "bad-inf", "user_id": "u", "bucket": "short", "payload": {"every": 1e999}}',
     "payload"),
    (b'{"id": "bad-nan", "user_id": "u", "bucket": "short", "payload": {"every": NaN}}',
     "line"),
    (line("bad-month", due_at="2026-13-45T00:00:00Z"), "due_at"),
    (line("bad-due-number", due_at=12345), "due_at"),
    (line("bad-year", due_at="99999-01-01T00:00:00Z"), "due_at"),
    (line("bad-two") + line("bad-three"), "line"),
    (line("bad-trailing") + b" ]junk", "line"),
]

CSV = (b"id,user_id,bucket,payload\n"
       b"c-good,u,short,1\n"
       b'c-good-array,u,short,"[1,\\"]\\"]"\n'
       b"c-extra,u,short,1,surplus\n"
       b"c-short,u\n"
       b"c-two-values,u,short,1 2\n"
       b'c-closed-early,u,short,"[1]]"\n'
       b"c-inf,u,short,1e999\n")
CSV_FIELDS = {"c-extra": "line", "c-short": "line", "c-two-values": "payload",
              "c-closed-early": "payload", "c-inf": "payload"}


def seed(spark: SparkSession, tmp_path: Path, source: Path, url: str) -> SeedReport:
    opts = parse_options(["--input", str(source), "--database-url", url,
                          "--rejects", str(tmp_path / f"rejects-{source.name}")])
    return run_seed(spark, opts, emit=lambda _line: None)


def rejects(tmp_path: Path, source: Path) -> list[dict[str, str]]:
    out = tmp_path / f"rejects-{source.name}"
    return [json.loads(text) for part in sorted(out.glob("part-*"))
            for text in part.read_text().splitlines()]


def stored(url: str) -> dict[str, Any]:
    with psycopg.connect(libpq_url(url)) as conn:
        rows = conn.execute("SELECT job_key, args::text FROM due_jobs").fetchall()
        conn.execute("TRUNCATE due_jobs")
    return {key: json.loads(args) for key, args in rows}


def test_hostile_rows_are_rejected_with_their_field_and_valid_rows_load(
        spark_session: SparkSession, fresh_pg_url: str, tmp_path: Path) -> None:
    source = tmp_path / "hostile.jsonl"
    source.write_bytes(b"\n".join(text for text, _ in JSON_LINES) + b"\n")
    report = seed(spark_session, tmp_path, source, fresh_pg_url)
    bad = [field for _, field in JSON_LINES if field]
    assert (report.read, report.rejected, report.loaded, report.present) == (
        len(JSON_LINES), len(bad), len(JSON_LINES) - len(bad) - 1, 1)
    got = sorted(r["field"] for r in rejects(tmp_path, source))
    assert got == sorted(bad)
    rows = stored(fresh_pg_url)
    assert set(rows) == {json.loads(text)["id"] for text, field in JSON_LINES if not field}
    assert rows["good-words"] == ["u", "Infinity"] and rows["good-big"] == ["u", {"n": 1e300}]

    table = tmp_path / "hostile.csv"
    table.write_bytes(CSV)
    report = seed(spark_session, tmp_path, table, fresh_pg_url)
    assert (report.read, report.loaded, report.rejected) == (7, 2, 5)
    assert {json.loads(r["source"])["id"] if r["source"].startswith("{")
            else r["source"].partition(",")[0]: r["field"]
            for r in rejects(tmp_path, table)} == CSV_FIELDS
    assert stored(fresh_pg_url) == {"c-good": ["u", 1], "c-good-array": ["u", [1, "]"]]}

    parquet = tmp_path / "hostile.parquet"
    offsets = pa.array([0, 4, 8], pa.int32()).buffers()[1]
    ids = pa.Array.from_buffers(pa.string(), 2, [None, offsets, pa.py_buffer(b"pq-1pq\xff2")])
    pq.write_table(pa.table({"id": ids, "user_id": ["u", "u"], "bucket": ["short", "short"],
                             "payload": ["1", "1"]}), parquet)
    report = seed(spark_session, tmp_path, parquet, fresh_pg_url)
    assert (report.read, report.loaded, report.rejected) == (2, 1, 1)
    assert [r["field"] for r in rejects(tmp_path, parquet)] == ["id"]
    assert set(stored(fresh_pg_url)) == {"pq-1"}

    for name, text in (("not-utf8.csv", b"id,user_id,bucket,payload\nn\xff,u,short,1\n"),
                       ("empty.csv", b"")):
        (tmp_path / name).write_bytes(text)
        with pytest.raises(SeedInputError, match=name):
            seed(spark_session, tmp_path, tmp_path / name, fresh_pg_url)
    assert stored(fresh_pg_url) == {}


def test_a_bad_seed_invocation_is_one_line_before_spark_starts(tmp_path: Path) -> None:
    (tmp_path / "empty-dir").mkdir()
    (tmp_path / "a-file").write_text("x")
    good = tmp_path / "in.jsonl"
    good.write_bytes(line("k") + b"\n")
    cases = {
        "missing": ["--input", str(tmp_path / "missing.jsonl")],
        "empty directory": ["--input", str(tmp_path / "empty-dir"), "--format", "json"],
        "no format": ["--input", str(tmp_path / "a-file")],
        "database URL": ["--input", str(good), "--database-url", "postgres://u@h/db"],
        "broker URL": ["--input", str(good), "--sink", "broker", "--broker-url", "http://h"],
        "rejects under a file": ["--input", str(good), "--rejects",
                                 str(tmp_path / "a-file" / "rejects")],
    }
    env = service_environment(PYTHONPATH=str(services.ROOT))
    for case, argv in cases.items():
        done = subprocess.run(recur_argv("seed", *argv), env=env, capture_output=True,
                              text=True, timeout=120, cwd=tmp_path)
        said = refusal_line(done)
        assert done.stderr.strip() == said and not done.stdout, (case, done.stderr)
