"""A row's bounds without services: what apply_async refuses, and what the scheduler judges
on its own before sending (scheduler/bounds.py, scheduler/outgoing.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from config.errors import ConfigError, InvalidMessage, InvalidSchedule
from config.settings import load_settings
from scheduler.bounds import Limits, check_call, check_job_key, check_retries, row_problem
from scheduler.outgoing import Framing, header_frame_size
from scheduler.refusals import TOO_LARGE, UNDECODABLE, UNKNOWN_BUCKET, Refusal
from scheduler.store import Claimed
from scheduler.task_message import task_message
from scheduler.wire import decode_call, encode_call

NOW = datetime(2030, 1, 1, tzinfo=UTC)
LIMITS = Limits()


def claimed(key: str = "k", args: str = '["u",null]', bucket: str = "short") -> Claimed:
    return Claimed(key, "tasks.process_message", bucket, args, NOW, 1, NOW + timedelta(hours=1))


@pytest.mark.parametrize(("key", "expected"), [
    ("k" * 300_000, "job_key: 300000 bytes, at most 512 (RECUR_MAX_JOB_KEY_BYTES)"),
    ("ü" * 257, "job_key: 514 bytes, at most 512"),
    (b"bytes", "job_key must be a string, got bytes"),
    (None, "job_key must be a string, got NoneType"),
    ("", "job_key must be a non-empty string"),
    ("\t ", "job_key must be a non-empty string"),
    ("a\x00", "job_key: control character U+0000 at position 1"),
    ("a\x7fb", "job_key: control character U+007F"),
    ("a\x85b", "job_key: control character U+0085"),
    ("\ud83d", "job_key: not valid Unicode (a lone surrogate)"),
])
def test_bad_job_keys_are_named(key: object, expected: str) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        check_job_key(key, LIMITS)
    assert str(caught.value).startswith(expected)


@pytest.mark.parametrize("key", ["k" * 512, "ü" * 256, "a b", "😀" * 128, "key/with:punct"])
def test_job_keys_at_the_bounds_pass(key: str) -> None:
    assert check_job_key(key, LIMITS) == key


def check(args: list[object], kwargs: dict[str, object] | None = None) -> None:
    kwargs = kwargs or {}
    check_call(encode_call(args, kwargs), args, kwargs, LIMITS)


@pytest.mark.parametrize(("args", "kwargs", "expected"), [
    ([{"payload": "a\x00"}], {}, "args[0].payload: contains a NUL character"),
    ([1, [2, ["\x00"]]], {}, "args[1][1][0]: contains a NUL"),
    ([{"k\x00": 1}], {}, "args[0]: a key contains a NUL"),
    ([], {"note": {"deep": "\udfff"}}, "kwargs.note.deep: is not valid Unicode"),
    (["x" * 70_000], {}, "args: 70013 bytes encoded (args and kwargs as stored), at most 65536"),
])
def test_calls_the_store_cannot_hold_are_named(args: list[object], kwargs: dict[str, object],
                                               expected: str) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        check(args, kwargs)
    assert str(caught.value).startswith(expected)


def test_calls_that_only_look_suspect_pass() -> None:
    check(["a literal \\u0000 and \\ud800 as text", "😀 is a pair, not a lone surrogate"])
    check(["x" * 65_000])


def test_deep_nesting_and_bad_retries_are_named() -> None:
    deep: list[object] = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(InvalidMessage, match="nested too deeply"):
        encode_call([deep], {})
    for bad in ("2", -1, True, 2**31, 1.5):
        with pytest.raises(InvalidSchedule, match="retries"):
            check_retries(bad)
    assert check_retries(None) == 0 and check_retries(3) == 3


@pytest.mark.parametrize("text", ['{"args":5}', "42", '"x"', "[]", '{"args":[],"kwargs":[]}',
                                  '{"retries":"x"}', '{"retries":-1}', "{broken"])
def test_stored_calls_that_cannot_be_decoded_are_one_error(text: str) -> None:
    with pytest.raises(InvalidMessage, match="args: the stored call cannot be decoded"):
        decode_call(text, "k", "short")


def test_a_row_is_judged_on_its_own_before_anything_is_sent() -> None:
    framing = Framing(channel_id=1, frame_max=131072, limits=LIMITS)
    route = ("recur.tasks", "short")

    def kind(row: Claimed, route: tuple[str, str] | None = route) -> str | None:
        got = framing.prepare(row, route, task_message)
        return got.kind if isinstance(got, Refusal) else None

    assert kind(claimed()) is None
    assert kind(claimed("k" * 600)) == TOO_LARGE
    assert kind(claimed(args='["u","' + "x" * 70_000 + '"]')) == TOO_LARGE
    assert kind(claimed(args='{"args":5}')) == UNDECODABLE
    assert kind(claimed(bucket="gone"), None) == UNKNOWN_BUCKET
    assert row_problem("k", "[]", LIMITS) is None


def test_headers_larger_than_a_frame_are_refused_whatever_the_limits() -> None:
    """The frame_too_large case: bounds raised past what the broker's frame holds."""
    wide = Limits(job_key_bytes=10**6, call_bytes=10**6)
    framing = Framing(channel_id=1, frame_max=4096, limits=wide)
    route = ("recur.tasks", "short")
    # The longest key the settings allow (1800 bytes; twice in the headers: the task id
    # and the dispatch header) fits the smallest frame a broker may offer.
    fits = framing.prepare(claimed("k" * 1800), route, task_message)
    assert not isinstance(fits, Refusal)
    assert fits.frames is not None and header_frame_size(fits.frames) <= 4088
    big = framing.prepare(claimed("k" * 5000), route, task_message)
    assert isinstance(big, Refusal) and big.kind == TOO_LARGE
    assert "over the broker's frame size (4088 bytes)" in big.reason
    # A large body is no reason: py-amqp splits it over several frames.
    body = framing.prepare(claimed(args='["u","' + "x" * 20_000 + '"]'), route, task_message)
    assert not isinstance(body, Refusal) and body.frames is None


@pytest.mark.parametrize(("variable", "value"), [
    ("RECUR_MAX_JOB_KEY_BYTES", "0"), ("RECUR_MAX_JOB_KEY_BYTES", "5000"),
    ("RECUR_MAX_CALL_BYTES", "200000"), ("RECUR_UNKNOWN_BUCKET_GRACE", "-1"),
])
def test_the_bounds_settings_are_bounded(variable: str, value: str) -> None:
    with pytest.raises(ConfigError, match=variable):
        load_settings({variable: value})
