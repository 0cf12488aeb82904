"""The seed job lets in no row that ``apply_async`` would refuse for the store: its id is the
row's job key (bytes, control characters), and no NUL reaches PostgreSQL's json."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyspark.sql import SparkSession

from config.errors import InvalidSchedule
from config.settings import load_settings
from scheduler.bounds import Limits, check_call, check_job_key
from scheduler.wire import encode_call
from spark.parse import parse_json_lines
from spark.transform import Rules, check

RULES = Rules.from_settings(load_settings({}))


def msg(**fields: Any) -> str:
    return json.dumps(fields, ensure_ascii=False)


def base(**fields: Any) -> dict[str, Any]:
    return {"id": "a", "user_id": "u", "bucket": "short", "payload": 1, **fields}


#: Lines whose message validate_message accepts but the store must not take.
REFUSED = {
    "id with a control character": (base(id="a\x01b"), "id: control character"),
    "id of 800 bytes (200 characters)": (base(id="😀" * 200), "id: 800 bytes, at most 512"),
    "NUL in the user id": (base(user_id="u\x00"), "user_id: contains a NUL character"),
    "NUL in the payload": (base(payload={"a": ["x\x00"]}), "payload: contains a NUL character"),
}
ACCEPTED = [base(id="é" * 200), base(payload="a literal \\u0000, not a NUL"),
            base(user_id="tab\tin a user id", payload={"k": "😀"})]


def reasons(spark: SparkSession, messages: list[dict[str, Any]]) -> list[str | None]:
    frame = spark.createDataFrame([(msg(**m),) for m in messages], "value string")
    return [row.reason for row in check(parse_json_lines(frame), RULES).collect()]


def apply_async_refuses(message: dict[str, Any]) -> bool:
    """Whether apply_async's bounds refuse the same message for the store."""
    limits = Limits()
    try:
        check_job_key(message["id"], limits, "job_key (the message id)")
        check_call(encode_call([message], {}, job_key=message["id"], bucket="short"),
                   [message], {}, limits)
    except InvalidSchedule:
        return True
    return False


@pytest.mark.parametrize("case", list(REFUSED))
def test_the_seed_refuses_what_the_store_cannot_take(spark_session: SparkSession,
                                                     case: str) -> None:
    message, expected = REFUSED[case]
    [reason] = reasons(spark_session, [message])
    assert reason is not None and reason.startswith(expected), reason
    assert apply_async_refuses(message)


def test_the_seed_takes_what_apply_async_takes(spark_session: SparkSession) -> None:
    assert reasons(spark_session, ACCEPTED) == [None] * len(ACCEPTED)
    assert not any(apply_async_refuses(m) for m in ACCEPTED)
