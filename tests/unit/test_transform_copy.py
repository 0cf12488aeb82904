"""The Spark-side COPY line and generator agree with their Python definitions."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime

import pyarrow as pa
from pyspark.sql import SparkSession

from config.settings import load_settings
from routing.messages import validate_message
from scheduler.store_bulk import copy_line, parse_copy_line
from spark.generate import MIX, generate
from spark.load import copy_block, store_frame
from spark.parse import parse_json_lines
from spark.transform import TASK, Rules, check

CFG = load_settings({})
RULES = Rules.from_settings(CFG)
START = datetime(2026, 1, 1, tzinfo=UTC)


def test_spark_copy_line_is_store_bulk_copy_line(spark_session: SparkSession) -> None:
    tricky = ["plain", "tab\there", "new\nline", "cr\rhere", "back\\slash", "\\t literal"]
    docs = [json.dumps({"id": ident, "user_id": "u", "bucket": "short", "payload": ident})
            for ident in tricky]
    frame = check(parse_json_lines(spark_session.createDataFrame([(d,) for d in docs],
                                                                 "value string")), RULES)
    got = sorted(r.line for r in store_frame(frame, START, 0).collect())
    expected = sorted(copy_line((
        ident, TASK, "short",
        json.dumps(["u", json.loads(doc)["payload"]], separators=(",", ":"), ensure_ascii=False),
        "2026-01-01T00:00:00.000Z")) for ident, doc in zip(tricky, docs, strict=True))
    assert got == expected
    assert sorted(parse_copy_line(line)[0] for line in got) == sorted(tricky)


def test_generated_population_is_valid_deterministic_and_mixed(
        spark_session: SparkSession) -> None:
    frame = check(generate(spark_session, 20_000, seed=3, partitions=2, kinds=CFG.kinds), RULES)
    rows = frame.select("id", "user_id", "bucket", "kind", "payload", "reason",
                        "resolved_bucket").collect()
    assert [r.reason for r in rows if r.reason] == []
    assert len({r.id for r in rows}) == 20_000
    again = generate(spark_session, 20_000, seed=3, partitions=5, kinds=CFG.kinds)
    assert sorted(map(tuple, again.select("id", "user_id", "payload").collect())) == sorted(
        (r.id, r.user_id, r.payload) for r in rows)
    share = Counter(r.resolved_bucket for r in rows)
    for bucket, expected in MIX:
        assert abs(share[bucket] / 20_000 - expected) < 0.02
    assert 0.25 < sum(1 for r in rows if r.kind) / 20_000 < 0.35
    users = Counter(r.user_id for r in rows)
    assert 500 < len(users) < 2_000 and users.most_common(1)[0][1] > 20  # skewed
    sizes = [len(r.payload) for r in rows]
    assert max(sizes) < 100 and min(sizes) >= 20
    sample = rows[0]
    validate_message({"id": sample.id, "user_id": sample.user_id, "payload":
                      json.loads(sample.payload),
                      **({"kind": sample.kind} if sample.kind else {"bucket": sample.bucket})},
                     CFG)


def test_copy_block_is_the_text_of_the_rows_an_array_spans() -> None:
    lines = pa.array(["a\tb\n", None, "c\\\\n\n", "d\n"]).drop_null()
    assert bytes(copy_block(lines)) == b"a\tb\nc\\\\n\nd\n"
    joined = pa.concat_arrays([lines.slice(1), lines])
    assert bytes(copy_block(joined.slice(1, 2))) == b"d\na\tb\n"  # sliced: its rows only
    wide = pa.array(["x\n", "yy\n"], pa.large_string())
    assert bytes(copy_block(wide.slice(1))) == b"yy\n"
