"""Hostile values at the Python API's edges that need no service: a lock lease too short to
be kept, a payload whose object keys JSON would rewrite, an error line quoting a huge value."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest

from config.errors import ConfigError, InvalidMessage, RecurError, one_line
from config.redact import SCHEME, masked, scheme_ends
from config.settings import load_settings
from routing.messages import validate_message
from tasks.distlock import user_lock


@pytest.mark.parametrize("ttl", [0.001, 0.5, 0.999])
def test_a_lease_under_a_second_is_refused(ttl: float) -> None:
    # the watchdog refreshes every sixth of the lease: one of a millisecond lapses while its
    # job runs and the user's next job may start beside it (docs/distlock.md: TTL >= 1 s)
    with pytest.raises(ValueError, match="ttl must be a number of seconds from 1"):
        user_lock(ttl=ttl)
    with pytest.raises(ConfigError, match="lock_ttl must be at least 1"):
        load_settings({"RECUR_LOCK_TTL": str(ttl)})


def test_a_lease_of_one_second_is_taken() -> None:
    assert load_settings({"RECUR_LOCK_TTL": "1"}).lock_ttl == 1.0
    user_lock(ttl=1)


@pytest.mark.parametrize("payload", [{1: "a"}, {None: 1}, {2.5: 1}, {False: 0},
                                     [{"a": {"b": [{3: 4}]}}], {"1": "kept", 1: "lost"}])
def test_a_payload_key_that_is_not_a_string_is_named(payload: Any) -> None:
    msg = {"id": "m", "user_id": "u", "bucket": "short", "payload": payload}
    with pytest.raises(InvalidMessage) as caught:
        validate_message(msg)
    assert caught.value.field == "payload" and "key must be a string" in str(caught.value)


def test_string_keys_and_their_subclasses_are_taken() -> None:
    class Name(str):
        pass

    payload = {"a": [{"b": {Name("c"): 1}}], "": None}
    msg = {"id": "m", "user_id": "u", "bucket": "short", "payload": payload}
    assert validate_message(msg)["payload"] is payload


def test_a_long_error_line_is_reported_at_once() -> None:
    # an error quoting a hostile value (a step or destination name of a million letters, a
    # job key given to `recur jobs show`): the URL masker tried every letter again, and
    # one_line took 20 s for 100,000 letters, half an hour for a million
    for text in ("x" * 100_000, "invalid: " + "a1" * 50_000 + " amqp://u:pw@h/v"):
        started = time.monotonic()
        line = one_line(RecurError(text))
        assert time.monotonic() - started < 5  # was 20 s
        assert line is not None and "pw" not in line.rpartition(" ")[2]


def test_the_scheme_finder_finds_what_the_scheme_pattern_does() -> None:
    rng = random.Random(7)
    for _ in range(20_000):
        text = "".join(rng.choice("ab1+.-:/ @x?=&Z") for _ in range(rng.randint(0, 30)))
        assert scheme_ends(text) == [m.end() for m in SCHEME.finditer(text)], text
    assert masked("x1amqp://a:b@c and redis://:pw@r/0") == "x1amqp://a:***@c and redis://:***@r/0"
