"""The Spark-side COPY line and generator agree with their Python definitions."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime

import pyarrow as pa
from pyspark.sql import SparkSession

from config.settings import load_settings
from routing.messages import validate_message
from scheduler.store.bulk import copy_field, copy_line, parse_copy_line
from scheduler.wire import encode_call
from spark.copy_lines import args_json, copy_escape, due_lines, json_strings
from spark.generate import MIX, generate
from spark.load import copy_block, store_frame, store_lines
from spark.parse import parse_json_lines
from spark.transform import Rules, check

CFG = load_settings({})
RULES = Rules.from_settings(CFG)
START = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_chunk_is_loaded_in_the_drain_index_order() -> None:
    rows = [("k3", "short", "2026-01-01T00:00:03.000Z"),
            ("k1", "long", "2026-01-01T00:00:01.000Z"),
            ("k2", "short", "2026-01-01T00:00:01.000Z"),
            ("k4", "medium", "2026-01-01T00:00:00.000Z"),
            ("k5", "long", "2026-01-01T00:00:00.500Z")]
    chunk = pa.RecordBatch.from_pydict({
        "job_key": [r[0] for r in rows], "bucket": [r[1] for r in rows],
        "user_id": ["u"] * 5, "kind": pa.nulls(5, pa.string()), "payload_text": ["{}"] * 5,
        "due_text": [r[2] for r in rows]})
    lines = store_lines(7)(chunk).to_pylist()
    assert sorted(lines) == sorted(due_lines(chunk, 7).to_pylist())
    assert [parse_copy_line(line)[0] for line in lines] == ["k5", "k1", "k4", "k2", "k3"]


def test_store_frame_lines_are_store_bulk_copy_lines(spark_session: SparkSession) -> None:
    tricky = ["plain", "tab\there", "new\nline", "cr\rhere", "back\\slash", "\\t literal",
              'quo"te', "ctl\x01", "é😀"]
    # An id is the row's job key: printable characters only (scheduler/bounds.py), so the
    # control characters ride in the user id and the payload.
    keys = [ident if ident.isprintable() else f"k{i}" for i, ident in enumerate(tricky)]
    docs = [json.dumps({"id": key, "user_id": ident, "bucket": "short", "payload": ident,
                        **({"kind": None} if i % 2 else {})})
            for i, (key, ident) in enumerate(zip(keys, tricky, strict=True))]
    frame = check(parse_json_lines(spark_session.createDataFrame([(d,) for d in docs],
                                                                 "value string")), RULES)
    table = store_frame(frame, START, 0).toArrow()
    got = sorted(due_lines(batch, 7).to_pylist()[i] for batch in table.to_batches()
                 for i in range(batch.num_rows))
    expected = sorted(copy_line((
        key, "7", "short",
        json.dumps([ident, ident], separators=(",", ":"), ensure_ascii=False),
        "2026-01-01T00:00:00.000Z")) for key, ident in zip(keys, tricky, strict=True))
    assert got == expected
    assert sorted(parse_copy_line(line)[0] for line in got) == sorted(keys)


def test_arrow_args_are_encode_call_args() -> None:
    users = pa.array(["u", 'q"uote', "back\\slash", "new\nline", "é😀", "\x1f"])
    kinds = pa.array([None, "sync", None, 'k"ind', None, "report"])
    payloads = pa.array(['{"n":1}', "null", '"x"', "[1,2]", '"é"', "{}"])
    got = args_json(users, payloads, kinds).to_pylist()
    for text, user, kind, payload in zip(got, users.to_pylist(), kinds.to_pylist(),
                                         payloads.to_pylist(), strict=True):
        message = {"id": "k", "user_id": user, "payload": json.loads(payload),
                   **({"bucket": "short"} if kind is None else {"kind": kind})}
        stored = json.loads(encode_call([message], {}, job_key="k", bucket="short"))
        assert text == json.dumps(stored, separators=(",", ":"), ensure_ascii=False)
    assert json_strings(pa.array([None, "a"])).to_pylist() == [None, '"a"']
    values = pa.array(["plain", "tab\t", "nl\ncr\r", "b\\s"])
    assert copy_escape(values).to_pylist() == [copy_field(v) for v in values.to_pylist()]


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
