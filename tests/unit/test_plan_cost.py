"""What ``apply_many`` does once rather than per call (tasks/many.py, scheduler/calls.py):
each payload is encoded once, the options its calls share are checked once, and the row
text built around the payload's encoding is the text the encoder writes itself."""

from __future__ import annotations

from typing import Any

import pytest

from config.errors import InvalidMessage, InvalidSchedule
from scheduler.wire import decode_call, encode_call
from tasks import process_message
from tasks.many import planned


class CountedItems(dict[str, Any]):
    """A payload object that counts its encodings: JSON's encoder asks a dict subclass
    for its items once per encoding (the checks read its keys and values, not items)."""

    encodings = 0

    def items(self) -> Any:
        CountedItems.encodings += 1
        return super().items()


class CountedDelay(float):
    """A countdown that counts the checks comparing it with zero."""

    checks = 0

    def __lt__(self, other: object) -> bool:
        CountedDelay.checks += 1
        return float(self) < float(other)  # type: ignore[arg-type]


def msg(i: int, payload: Any = None, **extra: Any) -> dict[str, Any]:
    return {"id": f"pc-{i}", "user_id": f"u-{i}", "bucket": "short", "payload": payload, **extra}


def rows(calls: list[Any], **options: Any) -> list[Any]:
    return list(planned(process_message, calls, options, []))


def test_each_payload_is_encoded_once() -> None:
    # checked and stored from one encoding (it was encoded twice: the size check's, the row's)
    CountedItems.encodings = 0
    jobs = rows([msg(i, CountedItems(n=i)) for i in range(50)], countdown=3600)
    assert CountedItems.encodings == 50
    assert [decode_call(j.args, j.job_key, j.bucket)[0][0]["payload"] for j in jobs] == [
        {"n": i} for i in range(50)
    ]


def test_shared_options_are_checked_once_and_a_call_s_own_per_call() -> None:
    CountedDelay.checks = 0
    rows([msg(i) for i in range(40)], countdown=CountedDelay(60.0))
    assert CountedDelay.checks == 1
    own = [process_message.s(msg(i)).set(countdown=CountedDelay(60.0)) for i in range(5)]
    rows(own, countdown=30)
    assert CountedDelay.checks == 1 + 5


def test_bad_shared_options_name_the_first_call() -> None:
    with pytest.raises(InvalidSchedule, match=r"^apply_many item 0: countdown must be a finite"):
        rows([msg(0), msg(1)], countdown=-1)
    with pytest.raises(InvalidSchedule, match=r"^apply_many item 0: priority must be"):
        rows([msg(0)], countdown=60, priority=256)
    with pytest.raises(InvalidSchedule, match=r"^apply_many item 0: priority is not kept"):
        rows([msg(0)], countdown=60, priority=5)


@pytest.mark.parametrize(
    "message",
    [
        msg(1, {"n": 1}),
        msg(2, "plain"),
        msg(3, [1, {"a": None}, 2.5]),
        msg(4, {"é": "ü\u2028", "emoji": "\U0001f600"}),
        msg(5, None, user_id="üser\u00e9"),
        {"id": "pc-6", "user_id": "u", "kind": "report", "payload": {"k": [True, False]}},
        msg(7, {"quote": 'a"b\\c\n\t'}),
    ],
)
def test_the_row_built_around_the_payload_is_the_encoder_s_own(message: dict[str, Any]) -> None:
    (job,) = rows([message], countdown=3600)
    general = encode_call([message], {}, job_key=job.job_key, bucket=job.bucket)
    assert job.args == general
    assert decode_call(job.args, job.job_key, job.bucket)[0] == [message]


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        ({"a": [{"b": {7: 1}}]}, "key must be a string"),
        ({"a": 1, 2: 1}, "key must be a string"),
    ],
)
def test_one_walk_still_names_a_key_that_is_no_string(payload: Any, problem: str) -> None:
    with pytest.raises(InvalidMessage, match=rf"apply_many item 1: payload.*{problem}"):
        rows([msg(0), msg(1, payload)], countdown=60)


def test_one_walk_still_names_a_payload_too_deep() -> None:
    deep: Any = 0
    for depth in range(101):
        deep = {"d": deep} if depth % 2 else [deep]
    with pytest.raises(InvalidMessage, match="nested more than 100 levels deep"):
        rows([msg(0, deep)], countdown=60)
    rows([msg(0, deep[0]["d"])], countdown=60)  # 99 levels: taken
