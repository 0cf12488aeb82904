"""@rate_limit's arguments: rates, bursts and keys refused by name at decoration time."""

from __future__ import annotations

import re
from typing import Any

import pytest

from config.errors import ConfigError, InvalidMessage
from tasks.flow import parse_rate, rate_limit
from tasks.flow.rate_limit import RateSpec


@pytest.mark.parametrize(("text", "per_second", "interval_ms"), [
    ("10/s", 10.0, 100.0), ("600/m", 10.0, 100.0), ("5/h", 5 / 3600, 720_000.0),
    (" 2.5 / sec ", 2.5, 400.0), ("1/minute", 1 / 60, 60_000.0)])
def test_rates_in_each_unit(text: str, per_second: float, interval_ms: float) -> None:
    rate = parse_rate(text)
    assert rate.per_second == pytest.approx(per_second)
    assert rate.interval_ms == pytest.approx(interval_ms)
    assert rate.burst == 1


@pytest.mark.parametrize(("rate", "burst", "names"), [
    ("10", None, "is not '<count>/<unit>'"), ("10/d", None, "unit s, m or h"),
    ("0/s", None, "above 0"), ("-1/s", None, "is not"), (10, None, "must be a string"),
    ("10/s", 0, "burst must be"), ("10/s", 2.5, "burst must be"),
    ("10/s", True, "burst must be"), ("10/s", 10**9, "burst must be"),
    # a start every 114,000 years: its next slot would overflow a date at every delivery
    ("0.000000001/h", None, "slower than one start in ten years")])
def test_bad_rates_and_bursts_are_refused_when_decorating(rate: Any, burst: Any,
                                                           names: str) -> None:
    with pytest.raises(ConfigError, match=names) as caught:
        rate_limit(key=lambda m: m["user_id"], rate=rate, burst=burst)
    assert isinstance(caught.value, ValueError)


def test_a_key_must_be_a_function_and_give_a_non_empty_string() -> None:
    with pytest.raises(ConfigError, match="key must be a function"):
        rate_limit(key="user_id", rate="1/s")  # type: ignore[arg-type]
    spec = RateSpec(lambda m: m["user_id"], parse_rate("1/s"))
    assert spec.key_of({"user_id": "u1"}) == "u1"
    assert spec.key_of({"user_id": 7}) == "7"
    for bad in ("", None, ["u"]):
        with pytest.raises(InvalidMessage, match="rate limit key"):
            spec.key_of({"user_id": bad})


@pytest.mark.parametrize(("key", "names"), [
    ("u" * 300_000, "300000 bytes, at most 512"), ("u\x00", "control character U+0000"),
    ("a\nb", "control character U+000A"), ("\ud800", "lone surrogate"), ("   ", "non-empty")])
def test_a_key_that_cannot_name_a_redis_key_is_refused_by_name(key: str, names: str) -> None:
    spec = RateSpec(lambda m: m["user_id"], parse_rate("1/s"))
    with pytest.raises(InvalidMessage, match=re.escape(names)):
        spec.key_of({"user_id": key})


def test_the_decorated_task_keeps_its_name_and_carries_its_limit() -> None:
    @rate_limit(key=lambda m: m["user_id"], rate="600/m", burst=3)
    def work(task: Any, message: Any) -> None:
        """Do the work."""

    assert work.__name__ == "work" and work.__doc__ == "Do the work."
    spec = work.__rate_limit__  # type: ignore[attr-defined]
    assert (spec.rate.per_second, spec.rate.burst) == (10.0, 3)


@pytest.mark.parametrize("parts", [("EVALSHA", "ab" * 20, 3, "p:rate:{k}", "é", 2.5),
                                   ("SCRIPT", "LOAD", b"\x00bytes\r\n")])
def test_the_limiters_own_packing_is_what_redis_py_sends(parts: tuple[Any, ...]) -> None:
    """tasks/flow/limiter.py packs the delivery's EVALSHA itself (a third of redis-py's
    CPU): byte for byte the command redis-py would send."""
    import redis

    from tasks.flow.limiter import pack

    connection: Any = redis.Connection
    expected = b"".join(connection().pack_command(*parts))
    assert pack(*parts) == expected
