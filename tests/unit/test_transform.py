"""The seed job's pure transform on small DataFrames (Spark local mode, no services)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from config.errors import InvalidMessage, SeedInputError
from config.settings import load_settings
from routing.messages import encoded_payload_size, validate_message
from scheduler.wire import decode_call, encode_call
from spark.load import due_jobs
from spark.parse import parse_json_lines, parse_table
from spark.transform import TASK, Rules, check, rejects

CFG = load_settings({})
RULES = Rules.from_settings(CFG)
START = datetime(2026, 1, 1, tzinfo=UTC)
NAIVE_START = datetime(2026, 1, 1)  # Spark hands timestamps back naive, in UTC here


def lines(spark: SparkSession, docs: list[str]) -> DataFrame:
    return spark.createDataFrame([(d,) for d in docs], "value string")


def checked(spark: SparkSession, docs: list[str], rules: Rules = RULES) -> DataFrame:
    return check(parse_json_lines(lines(spark, docs)), rules)


def msg(**fields: Any) -> str:
    return json.dumps(fields, ensure_ascii=False)


#: One line per rule, with the field validate_message names for it.
BAD_LINES = {
    "not json {": "line",
    "[1, 2]": "message",
    msg(id="a", user_id="u", bucket="short", payload=1, color="red"): "color",
    msg(user_id="u", bucket="short", payload=1): "id",
    msg(id=5, user_id="u", bucket="short", payload=1): "id",
    msg(id=" \t", user_id="u", bucket="short", payload=1): "id",
    msg(id="x" * 201, user_id="u", bucket="short", payload=1): "id",
    msg(id="a", bucket="short", payload=1): "user_id",
    msg(id="a", user_id="", bucket="short", payload=1): "user_id",
    msg(id="a", user_id="\u2003", bucket="short", payload=1): "user_id",
    msg(id="a", user_id=["u"], bucket="short", payload=1): "user_id",
    msg(id="a", user_id="u", payload=1): "bucket",
    msg(id="a", user_id="u", bucket="huge", payload=1): "bucket",
    msg(id="a", user_id="u", bucket=3, payload=1): "bucket",
    msg(id="a", user_id="u", bucket="short", kind="ping", payload=1): "bucket",
    msg(id="a", user_id="u", kind="dance", payload=1): "kind",
    msg(id="a", user_id="u", kind=7, payload=1): "kind",
    msg(id="a", user_id="u", bucket="short"): "payload",
    msg(id="a", user_id="u", bucket="short", payload="x" * 1100): "payload",
    msg(id="a", user_id="u", bucket="long", payload="é" * 200): "payload",
}

GOOD_LINES = [
    msg(id="g1", user_id="u1", bucket="short", payload={"n": 1, "s": "é😀"}),
    msg(id="g2", user_id="u2", kind="sync", payload=None),
    msg(id="g3", user_id="u3", bucket="long", payload=[1, "two", {"three": 3}]),
    msg(id="g4", user_id="u4", bucket="medium", payload="é" * 150),
    msg(id="g5", user_id="u5", bucket="short", payload="tab\there \"quoted\" back\\slash"),
    # Already compact (kept as written) next to ids that need escaping in JSON.
    '{"id":"g6","user_id":"u\\"6\\n","bucket":"short","payload":{"a":[1,"b",{"c":null}]}}',
    '{"id":"g7","user_id":"u7\\\\","kind":"sync","payload":"123\\n"}',
]


def python_field(line: str) -> str | None:
    """The field validate_message refuses ``line`` for (None when valid)."""
    try:
        validate_message(json.loads(line), CFG)
    except InvalidMessage as exc:
        return exc.field
    except ValueError:
        return "line"
    return None


def test_transform_rejects_the_same_field_as_validate_message(
        spark_session: SparkSession) -> None:
    docs = [*BAD_LINES, *GOOD_LINES]
    got = {r.source: r.field for r in checked(spark_session, docs).collect()}
    assert got == {line: python_field(line) for line in docs}
    assert {line: field for line, field in got.items() if field} == BAD_LINES


def test_valid_rows_become_messages_that_validate_message_accepts(
        spark_session: SparkSession) -> None:
    rows = due_jobs(checked(spark_session, GOOD_LINES), START, 0).collect()
    assert len(rows) == len(GOOD_LINES)
    for row, line in zip(sorted(rows, key=lambda r: r.job_key), GOOD_LINES, strict=True):
        args, kwargs, _ = decode_call(row.args, row.job_key, row.bucket)
        assert kwargs == {} and len(args) == 1
        assert args[0] == json.loads(line)
        assert validate_message(args[0], CFG)["bucket"] == row.bucket
        assert json.loads(row.args) == json.loads(
            encode_call(args, {}, job_key=row.job_key, bucket=row.bucket))
        assert row.task == TASK


def test_compact_payloads_are_kept_as_written_and_others_re_encoded(
        spark_session: SparkSession) -> None:
    payloads = {"a": '{"n":1.50,"s":"x"}', "b": '{"n": 1, "s": "x y"}', "c": '"\\u00e9"',
                "d": '{"n":1}\n', "e": "{nope}"}
    table = spark_session.createDataFrame(
        [(key, "u", "short", text) for key, text in payloads.items()],
        "id string, user_id string, bucket string, payload string")
    got = {r.id: (r.payload_text, r.field) for r in check(parse_table(table), RULES).collect()}
    assert got == {"a": ('{"n":1.50,"s":"x"}', None), "b": ('{"n":1,"s":"x y"}', None),
                   "c": ('"é"', None), "d": ('{"n":1}', None), "e": (None, "payload")}


def test_due_jobs_rows(spark_session: SparkSession) -> None:
    docs = [msg(id="a", user_id="u", bucket="short", payload={"k": 1}),
            msg(id="b", user_id="v", kind="report", payload=None,
                due_at="2026-02-01T12:00:00+02:00"),
            msg(id="c", user_id="w", bucket="nope", payload=1)]
    expected = spark_session.createDataFrame([
        ("a", TASK, "short",
         '["u",{"k":1}]',
         NAIVE_START),
        ("b", TASK, "long",
         '["v",null,"report"]',
         datetime(2026, 2, 1, 10, 0)),
    ], "job_key string, task string, bucket string, args string, due_at timestamp")
    assertDataFrameEqual(due_jobs(checked(spark_session, docs), START, 0), expected)


def test_rejects_carry_source_field_and_reason(spark_session: SparkSession) -> None:
    docs = [msg(id="a", user_id="u", bucket="nope", payload=1),
            msg(id="b", user_id="u", bucket="short"),
            msg(id="c", user_id="u", bucket="short", payload=1, due_at="soon"),
            msg(id="d", user_id="u", bucket="short", payload=1)]
    expected = spark_session.createDataFrame([
        (docs[0], "bucket", "bucket: unknown bucket nope (known: short, medium, long, io)"),
        (docs[1], "payload", "payload: missing (use null for no payload)"),
        (docs[2], "due_at", "due_at: not an ISO-8601 time"),
    ], "source string, field string, reason string")
    assertDataFrameEqual(rejects(checked(spark_session, docs)), expected)


@pytest.mark.parametrize("payload", ["a" * 16, "a" * 17, "é", "ééé", "😀", "😀a", {"é": "😀"},
                                     [1.5, None, True], "tab\t\"q\"\\"])
def test_payload_limit_counts_bytes_like_json_dumps(spark_session: SparkSession,
                                                    payload: Any) -> None:
    rules = Rules(RULES.buckets, RULES.kinds, max_payload_bytes=18)
    line = msg(id="a", user_id="u", bucket="short", payload=payload)
    (row,) = checked(spark_session, [line], rules).collect()
    assert (row.field == "payload") == (encoded_payload_size(payload) > 18)


def test_first_due_times_spread_over_the_window_the_same_way_every_time(
        spark_session: SparkSession) -> None:
    docs = [msg(id=f"m{i}", user_id="u", bucket="short", payload=i) for i in range(2000)]
    frame = checked(spark_session, docs)
    spread = timedelta(hours=1)
    first = {r.job_key: r.due_at for r in due_jobs(frame, START, 3600).collect()}
    again = {r.job_key: r.due_at for r in due_jobs(frame, START, 3600).collect()}
    assert first == again
    assert all(NAIVE_START <= due < NAIVE_START + spread for due in first.values())
    seconds = {due.replace(microsecond=0) for due in first.values()}
    assert len(seconds) > 1500  # 2000 jobs over 3600 s: not bunched in a few seconds
    quarters = [sum(1 for d in first.values() if (d - NAIVE_START) // (spread / 4) == q)
                for q in range(4)]
    assert min(quarters) > 400


def test_tables_refuse_non_string_ids_and_unknown_columns(spark_session: SparkSession) -> None:
    table = spark_session.createDataFrame(
        [(1, "u", "short", '{"a":1}'), (None, "u", "short", "1"), (3, "u", "short", "{bad")],
        "id long, user_id string, bucket string, payload string")
    got = check(parse_table(table), RULES).select("field").collect()
    assert [r.field for r in got] == ["id", "id", "id"]
    with pytest.raises(SeedInputError, match="'colour' is not a seed field"):
        parse_table(table.withColumn("colour", F.lit("red")))


def test_csv_style_table_is_checked_like_json(spark_session: SparkSession) -> None:
    table = spark_session.createDataFrame(
        [("a", "u", "short", None, '{"n": 1}', None),
         ("b", "u", None, "sync", "{bad", None),
         ("c", "u", None, "ping", "null", "2026-01-02 00:00:00")],
        "id string, user_id string, bucket string, kind string, payload string, due_at string")
    frame = check(parse_table(table), RULES)
    assert [(r.id, r.field) for r in frame.orderBy("id").collect()] == [
        ("a", None), ("b", "payload"), ("c", None)]
    due = {r.job_key: r for r in due_jobs(frame, START, 0).collect()}
    assert decode_call(due["a"].args, "a", "short")[0][0]["payload"] == {"n": 1}
    assert due["c"].due_at == datetime(2026, 1, 2) and due["c"].bucket == "short"
