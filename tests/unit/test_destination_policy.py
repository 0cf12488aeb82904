"""What each HTTP answer of a destination means (sent, retry, outage, dead letter), the
settings that change it, and the one line kept of a refusal's body."""

from __future__ import annotations

import httpx
import pytest

from config.destination_policy import Verdict, parse_policies, parse_statuses, verdict
from config.errors import ConfigError
from config.settings import load_settings
from routing.reseq.outbound import BODY_LIMIT, DETAIL_CHARS, Answer, detail_of

SENT, RETRY, OUTAGE, DEAD = Verdict.SENT, Verdict.RETRY, Verdict.OUTAGE, Verdict.DEAD


@pytest.mark.parametrize(("status", "expected"), [
    *((s, SENT) for s in (200, 201, 202, 204, 299)),
    # not ready: credentials, address, a redirect (never followed)
    *((s, OUTAGE) for s in (300, 301, 302, 303, 304, 307, 308, 399, 401, 403, 404, 410)),
    # about the message itself
    *((s, DEAD) for s in (400, 402, 405, 409, 411, 413, 415, 418, 422, 451, 499)),
    # may pass by itself
    *((s, RETRY) for s in (408, 429, 500, 502, 503, 504, 599)),
    # not HTTP as it is defined: wait, loudly
    *((s, OUTAGE) for s in (100, 101, 199, 600, 999)),
])
def test_default_verdicts(status: int, expected: Verdict) -> None:
    assert verdict(status) is expected


def test_more_outage_statuses_and_a_destinations_own_policy() -> None:
    assert verdict(409, extra_outage=parse_statuses("409, 423")) is OUTAGE
    assert verdict(423, extra_outage=parse_statuses("409 423")) is OUTAGE
    own = parse_policies("billing:outage=4xx;dead=400+422+503")["billing"]
    assert verdict(400, own) is DEAD and verdict(422, own) is DEAD, "an exact status beats 4xx"
    assert verdict(413, own) is OUTAGE and verdict(401, own) is OUTAGE
    assert verdict(503, own) is DEAD and verdict(502, own) is RETRY
    assert verdict(200, own) is SENT
    own = parse_policies("crm: dead = 404 + 3xx")["crm"]
    assert verdict(404, own) is DEAD and verdict(302, own) is DEAD and verdict(401, own) is OUTAGE


def test_the_settings_carry_the_policy_and_keep_the_old_destinations_syntax() -> None:
    cfg = load_settings({"RECUR_DESTINATIONS": "billing:http://127.0.0.1:9/in,crm:https://x/y",
                         "RECUR_DESTINATION_POLICIES": "billing:outage=409;dead=404",
                         "RECUR_DESTINATION_OUTAGE_STATUSES": "423"})
    assert dict(cfg.destinations) == {"billing": "http://127.0.0.1:9/in", "crm": "https://x/y"}
    assert cfg.destination_outage_statuses == (423,)
    assert dict(cfg.destination_policies["billing"]) == {409: "outage", 404: "dead"}
    assert "crm" not in cfg.destination_policies
    defaults = load_settings({})
    assert defaults.destination_outage_statuses == () and not defaults.destination_policies


@pytest.mark.parametrize(("variable", "value", "words"), [
    ("RECUR_DESTINATION_OUTAGE_STATUSES", "200", "2xx is always delivered"),
    ("RECUR_DESTINATION_OUTAGE_STATUSES", "4x", "not an HTTP status"),
    ("RECUR_DESTINATION_OUTAGE_STATUSES", "1000", "not an HTTP status"),
    ("RECUR_DESTINATION_POLICIES", "a:outage=409,423", "join statuses with '+'"),
    ("RECUR_DESTINATION_POLICIES", "a:retry=409", "is not 'outage=CODES' or 'dead=CODES'"),
    ("RECUR_DESTINATION_POLICIES", "a:outage=", "is not 'outage=CODES' or 'dead=CODES'"),
    ("RECUR_DESTINATION_POLICIES", "a:outage=409;dead=409", "409 is both outage and dead"),
    ("RECUR_DESTINATION_POLICIES", "a:dead=2xx", "not an HTTP status"),
    ("RECUR_DESTINATION_POLICIES", "a:dead=404,a:outage=409", "two policies"),
    ("RECUR_DESTINATION_POLICIES", "nowhere:dead=404", "not in RECUR_DESTINATIONS: nowhere"),
])
def test_a_bad_policy_is_refused_naming_the_variable(variable: str, value: str,
                                                      words: str) -> None:
    env = {"RECUR_DESTINATIONS": "a:http://127.0.0.1:9/a", variable: value}
    with pytest.raises(ConfigError, match=variable) as caught:
        load_settings(env)
    assert words in str(caught.value)


def test_a_refusals_detail_is_one_short_printable_line() -> None:
    long = httpx.Response(400, content=b"bad\r\nfield\x00 x" + b"y" * BODY_LIMIT)
    text = detail_of(long, long.content[:BODY_LIMIT])
    assert text.startswith("Bad Request: bad field x") and "\n" not in text
    assert len(text) <= len("Bad Request: ") + DETAIL_CHARS + 3
    gzipped = httpx.Response(422, headers={"Content-Encoding": "gzip"}, content=b"\x1f\x8b")
    assert detail_of(gzipped, b"\x1f\x8b") == "Unprocessable Entity: (gzip body not shown)"
    assert detail_of(httpx.Response(401), b"") == "Unauthorized"
    assert Answer(401, OUTAGE, "Unauthorized").describe() == "HTTP 401 Unauthorized"
    assert Answer(0, RETRY, "d seq 1: ConnectError: refused").describe() == \
        "d seq 1: ConnectError: refused"
