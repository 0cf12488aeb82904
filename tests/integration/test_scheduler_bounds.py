"""``apply_async`` refuses, on every store alike, a row the store or the broker would refuse
later: a named :class:`InvalidSchedule` before anything is written, never an outage."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from config.errors import InvalidSchedule, StoreError
from scheduler.store import DueStore
from tasks.app import app
from tasks.base import MessageTask


@app.task(bind=True, base=MessageTask, name="tests.bounds_any_kwargs")
def process_message(self: MessageTask, message: Any, **extra: Any) -> None:
    """A message task that takes keyword arguments (apply_async refuses a call that does
    not fit its task): these calls are only stored, never run."""


def message(ident: str = "m-1", **extra: Any) -> dict[str, Any]:
    return {"id": ident, "user_id": "u-1", "bucket": "short", "payload": {"n": 1}, **extra}


def stored(store: DueStore) -> int:
    with store.engine.connect() as conn:
        return int(conn.exec_driver_sql("SELECT count(*) FROM due_jobs").scalar() or 0)


BAD = {
    "oversized key": ((message(),), {}, {"job_key": "k" * 300_000},
                      "job_key: 300000 bytes, at most 512"),
    "key of multibyte characters": ((message(),), {}, {"job_key": "é" * 300},
                                    "job_key: 600 bytes, at most 512"),
    "NUL in the key": ((message(),), {}, {"job_key": "a\x00b"}, "job_key: control character"),
    "control character in the key": ((message(),), {}, {"job_key": "a\nb"},
                                     "job_key: control character U+000A"),
    "lone surrogate in the key": ((message(),), {}, {"job_key": "a\ud800b"},
                                  "job_key: not valid Unicode"),
    "key not a string": ((message(),), {}, {"job_key": 42}, "job_key must be a string"),
    "blank key": ((message(),), {}, {"job_key": "  "}, "job_key must be a non-empty"),
    "message id as key with NUL": ((message("m\x00"),), {}, {},
                                   "job_key (the message id): control character U+0000"),
    "NUL in the payload": ((message(payload={"name": "a\x00"}),), {}, {},
                           "args[0].payload.name: contains a NUL character"),
    "NUL in a payload key": ((message(payload={"a\x00": 1}),), {}, {},
                             "args[0].payload: a key contains a NUL"),
    # (one in the message's id, user_id or payload is the message check's: InvalidMessage)
    "lone surrogate in a keyword argument": ((message(),), {"note": ["u\udc00"]}, {},
                                             "kwargs.note[0]: is not valid Unicode"),
    "NUL in a keyword argument": ((message(),), {"note": ["x\x00"]}, {},
                                  "kwargs.note[0]: contains a NUL"),
    "oversized call": ((message(),), {"blob": "x" * 70_000}, {},
                       "at most 65536 (RECUR_MAX_CALL_BYTES)"),
    "retries not a number": ((message(),), {}, {"retries": "2"}, "retries must be a whole"),
    "countdown past year 9999": ((message(),), {}, {"countdown": 1e12},
                                 "countdown 1000000000000.0 is past"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_refused_by_name_before_anything_is_written(
        store_in_use: DueStore, case: str) -> None:
    args, kwargs, options, expected = BAD[case]
    options = {"countdown": 600, **options}
    with pytest.raises(InvalidSchedule) as caught:
        process_message.apply_async(args, kwargs, **options)
    assert expected in str(caught.value)
    assert not isinstance(caught.value, StoreError)
    assert stored(store_in_use) == 0


def test_inputs_at_the_bounds_are_stored(store_in_use: DueStore) -> None:
    keys = ["k" * 512, "é" * 256, "ключ-😀", "tab\\u0000-as-text"]
    for key in keys:
        process_message.apply_async((message(),), countdown=600, job_key=key)
    payload = {"emoji": "😀", "text": "a literal \\u0000, not a NUL", "blob": "x" * 60_000}
    process_message.apply_async((message("m-2", payload=None),), {"note": payload},
                                countdown=600)
    eta = datetime(9999, 12, 30, tzinfo=UTC)
    process_message.apply_async((message("m-3"),), eta=eta)
    assert stored(store_in_use) == len(keys) + 2
    assert store_in_use.stats(eta + timedelta(hours=1))["short"].due == len(keys) + 2
