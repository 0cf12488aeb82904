"""Control headers are input: each is checked where it is read, optionally signed
(config/signing.py), and a bad one is a named refusal (InvalidControlHeader)."""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from config import signing
from config.errors import ConfigError, InvalidControlHeader
from config.settings import load_settings, settings
from scheduler import wire
from scheduler.wire import Dispatch, dispatch_in, dispatch_of, parse_dispatch
from tasks.distlock.job import SEQ, SINCE, Ticket

KEY = "k" * 40
LEASE = 1_795_253_734_375_383


def signed(headers: dict[str, Any], key: str = KEY) -> dict[str, Any]:
    """Protocol 2 message headers as a recur publisher signs them."""
    out = {"id": "task-1", "task": "tests.locked_work", **headers}
    signing.sign(out, key)
    return out


def request_of(headers: dict[str, Any]) -> Any:
    """A worker request as Celery builds it: the id and task name, custom headers."""
    custom = {k: v for k, v in headers.items() if k not in ("id", "task")}
    return SimpleNamespace(id=headers["id"], task=headers["task"], headers=custom, **custom)


def test_a_signature_binds_the_header_its_value_and_the_job() -> None:
    headers = signed({SEQ: 7, SINCE: 100.5, wire.DISPATCH_HEADER: ["k", 3, LEASE, None]})
    for name in signing.SIGNED:
        signing.verify_headers(KEY, headers, name)  # as published: accepted
    cases = {
        "another value": {**headers, SEQ: 8},
        "another job": {**headers, "id": "task-2"},
        "another task": {**headers, "task": "tests.other"},
        "another key": signed({SEQ: 7}, key="x" * 40),
        "a signature moved to another header": {
            **headers, signing.SIG_HEADER: headers[signing.SIG_HEADER].replace(SEQ, SINCE)},
    }
    for case, forged in cases.items():
        with pytest.raises(InvalidControlHeader, match=r"bad signature|unsigned"):
            signing.verify_headers(KEY, forged, SEQ)
            pytest.fail(f"{case}: accepted")


def test_unsigned_or_garbled_signatures_are_refused_with_a_key_and_ignored_without() -> None:
    for sig in (None, "", 5, "recur_lock_seq", "recur_lock_seq=", ["x"]):
        headers = {"id": "t", "task": "x", SEQ: 7, signing.SIG_HEADER: sig}
        with pytest.raises(InvalidControlHeader, match=f"{SEQ}: (unsigned|bad signature)"):
            signing.verify_headers(KEY, headers, SEQ)
        signing.verify_headers("", headers, SEQ)  # no key: no check
    signing.verify_headers(KEY, {"id": "t"}, SEQ)  # no header: nothing to check


def test_signing_drops_a_stale_signature_and_signs_only_what_is_there() -> None:
    headers = {"id": "t", "task": "x", signing.SIG_HEADER: "recur_lock_seq=abc"}
    signing.sign(headers, KEY)
    assert signing.SIG_HEADER not in headers
    headers = {"id": "t", "task": "x", SEQ: 1}
    signing.sign(headers, "")
    assert signing.SIG_HEADER not in headers


def test_the_dispatch_header_must_carry_its_lease_stamp() -> None:
    assert parse_dispatch(["k", 3, LEASE]) == Dispatch("k", 3, LEASE)
    assert parse_dispatch(("k", 3, LEASE, 5)) == Dispatch("k", 3, LEASE, 5)
    bad = {
        "no lease stamp": ["k", 3, None], "null lease, a due time": ["k", 3, None, 5],
        "too short": ["k", 3], "too long": ["k", 3, LEASE, 5, 6], "a string": "k35",
        "a number": 5, "a mapping": {"k": 3}, "empty key": ["", 3, LEASE],
        "key not a string": [7, 3, LEASE], "token a string": ["k", "3", LEASE],
        "token a bool": ["k", True, LEASE], "lease a float": ["k", 3, 1.5],
        "due a string": ["k", 3, LEASE, "soon"],
    }
    for case, value in bad.items():
        with pytest.raises(InvalidControlHeader, match="recur_dispatch"):
            parse_dispatch(value)
            pytest.fail(f"{case}: accepted")
        assert dispatch_in({wire.DISPATCH_HEADER: value}) is None, case
    with pytest.raises(InvalidControlHeader, match="no lease stamp"):
        dispatch_of(SimpleNamespace(headers={wire.DISPATCH_HEADER: ["k", 3, None]}))


def test_a_copy_without_a_lease_stamp_matches_no_dispatch() -> None:
    from datetime import UTC, datetime

    lease = datetime(2026, 1, 1, tzinfo=UTC)
    assert not Dispatch("k", 3, None).matches((3, lease))
    assert Dispatch("k", 3, wire.micros(lease)).matches((3, lease))


def use_key(monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    keyed = replace(settings(), signing_key=key)
    monkeypatch.setattr(wire, "settings", lambda: keyed)


def test_with_a_key_the_dispatch_header_must_be_signed_for_its_job(
        monkeypatch: pytest.MonkeyPatch) -> None:
    use_key(monkeypatch, KEY)
    headers = signed({wire.DISPATCH_HEADER: ["k", 3, LEASE, None]})
    assert dispatch_of(request_of(headers)) == Dispatch("k", 3, LEASE)
    assert dispatch_in(headers) == Dispatch("k", 3, LEASE)
    forged = {**headers, wire.DISPATCH_HEADER: ["k", 4, LEASE, None]}
    with pytest.raises(InvalidControlHeader, match="bad signature"):
        dispatch_of(request_of(forged))
    assert dispatch_in(forged) is None  # the dead-letter sweep ignores it too
    unsigned = {k: v for k, v in headers.items() if k != signing.SIG_HEADER}
    with pytest.raises(InvalidControlHeader, match="unsigned"):
        dispatch_of(request_of(unsigned))
    assert dispatch_of(SimpleNamespace(headers={})) is None


def test_the_ticket_refuses_numbers_and_times_that_are_not_ones() -> None:
    assert Ticket.from_request(SimpleNamespace(headers={SEQ: 7, SINCE: 1.5})) == Ticket(7, 1.5)
    for value in (-1, True, "7", 7.0, [7], 2.5):
        with pytest.raises(InvalidControlHeader, match=SEQ):
            Ticket.from_request(SimpleNamespace(headers={SEQ: value}))
    for value in (math.nan, math.inf, -1.0, "now", False):
        with pytest.raises(InvalidControlHeader, match=SINCE):
            Ticket.from_request(SimpleNamespace(headers={SEQ: 7, SINCE: value}))


def test_with_a_key_the_ticket_must_be_signed_for_its_job() -> None:
    headers = signed({SEQ: 7, SINCE: 100.5})
    assert Ticket.from_request(request_of(headers), KEY) == Ticket(7, 100.5)
    with pytest.raises(InvalidControlHeader, match=f"{SEQ}: bad signature"):
        Ticket.from_request(request_of({**headers, SEQ: 10**12}), KEY)
    with pytest.raises(InvalidControlHeader, match=f"{SINCE}: unsigned"):
        Ticket.from_request(request_of({"id": "t", "task": "x", SINCE: 1.0}), KEY)
    assert Ticket.from_request(request_of({"id": "t", "task": "x"}), KEY) == Ticket()


def test_a_signing_key_is_long_enough_and_never_printed() -> None:
    with pytest.raises(ConfigError, match=r"RECUR_SIGNING_KEY.*at least 16") as caught:
        load_settings({"RECUR_SIGNING_KEY": "short-secret"})
    assert "short-secret" not in str(caught.value)
    assert load_settings({"RECUR_SIGNING_KEY": KEY}).signing_key == KEY
    assert load_settings({}).signing_key == ""


@pytest.mark.parametrize(("var", "value"), [
    ("RECUR_LOCK_MAX_PARKED", "0"), ("RECUR_LOCK_MAX_PARKED", "1e9"),
    ("RECUR_RESEQ_MAX_ENTRY_BYTES", "0"), ("RECUR_RESULT_EXPIRES", "0"),
    ("RECUR_RESULT_EXPIRES", "inf")])
def test_the_caps_are_bounded_settings(var: str, value: str) -> None:
    with pytest.raises(ConfigError, match=var):
        load_settings({var: value})
