"""Checks of settings that look at more than one number: secrets, addresses, and
settings that contradict each other.

Each check says what is wrong in one line naming every variable involved;
``config.settings.problems`` collects them with the per-variable errors, so
``recur settings`` lists every mistake at once.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from config.buckets import BucketTable
from config.redact import is_placeholder, passwords

#: Suffixes of settings whose whole value is a secret (flower_password, signing_key, ...).
SECRET_SUFFIXES = ("_password", "_secret", "_token", "_key")
_HOSTNAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,62}(?:\.[A-Za-z0-9-]{1,63})*")

#: A cross-field check: (the variables it reads, the line if they contradict each other).
Contradiction = tuple[tuple[str, ...], str]


def is_secret(name: str) -> bool:
    """Whether setting ``name`` holds a secret as its whole value (shown as ***)."""
    return name.endswith(SECRET_SUFFIXES)


def placeholder_problem(name: str, value: Any) -> str | None:
    """Why ``value`` holds a placeholder password (``change-me…``), or None.

    The whole value of a secret setting, and the password of every URL in any
    other setting (a list of URLs, a name -> URL mapping) are looked at.
    """
    texts = list(value.values()) if isinstance(value, Mapping) else [value]
    for text in (t for t in texts if isinstance(t, str)):
        secrets = [text] if is_secret(name) else passwords(text)
        if any(is_placeholder(secret) for secret in secrets):
            return ("holds a placeholder password ('change-me...', as in .env.example): "
                    "set a real one before starting")
    return None


def check_bind(address: str) -> None:
    """An address to listen on: an IP address or a host name (ValueError if not)."""
    try:
        ipaddress.ip_address(address)
    except ValueError:
        if len(address) > 253 or not _HOSTNAME.fullmatch(address):
            raise ValueError(f"{address!r} is not an IP address or host name to listen on "
                             "(127.0.0.1: this host only; 0.0.0.0: every interface)") from None


def is_loopback(address: str) -> bool:
    """Whether listening on ``address`` keeps a server on this host only."""
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"


def _watermarks(v: Mapping[str, Any], _table: BucketTable) -> Iterator[Contradiction]:
    if v["low_watermark"] > v["high_watermark"]:
        yield (("low_watermark", "high_watermark"),
               f"RECUR_LOW_WATERMARK={v['low_watermark']} is above RECUR_HIGH_WATERMARK="
               f"{v['high_watermark']}: the scheduler refills a queue below the low one, up to "
               "the high one")


def lease_warnings(lease_seconds: float, table: BucketTable) -> list[str]:
    """A lease not above a bucket's time limit: a job still running may be dispatched
    again (its token check drops the older copy's settle, so nothing is lost, but the
    work runs twice). A warning, not a refusal: tests and demos shorten the lease on
    purpose so lost copies come back in seconds."""
    longest = max(table.buckets, key=lambda b: b.time_limit)
    if lease_seconds > longest.time_limit:
        return []
    return [f"RECUR_LEASE_SECONDS={lease_seconds:g} is not above the time_limit of bucket "
            f"{longest.name!r} ({longest.time_limit:g} s, {table.source} table): a job still "
            "running that long would be dispatched again"]


def _metrics_auth(v: Mapping[str, Any], _table: BucketTable) -> Iterator[Contradiction]:
    if bool(v["metrics_user"]) != bool(v["metrics_password"]):
        yield (("metrics_user", "metrics_password"),
               "RECUR_METRICS_USER and RECUR_METRICS_PASSWORD: set both (basic auth on every "
               "/metrics) or neither")
    if ":" in v["metrics_user"]:
        yield (("metrics_user",), "RECUR_METRICS_USER must not contain ':' (basic auth ends "
                                  "the user at the first ':')")


CROSS_CHECKS: tuple[Callable[[Mapping[str, Any], BucketTable], Iterator[Contradiction]], ...] = (
    _watermarks, _metrics_auth)


def contradictions(values: Mapping[str, Any], table: BucketTable,
                   bad: set[str]) -> list[str]:
    """One line per pair of settings that contradict each other; a check reading a
    setting already reported bad (``bad``: setting names) is skipped."""
    lines = []
    for check in CROSS_CHECKS:
        for names, line in check(values, table):
            if not bad & set(names):
                lines.append(line)
    return lines
