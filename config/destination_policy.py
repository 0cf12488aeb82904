"""What a destination's HTTP answer means for the message and for the destination.

Every answer falls in one of four classes:

* ``SENT``: 2xx, the destination has the message; the sender goes on.
* ``RETRY``: the destination may answer better in a moment (5xx, 408, 429, no
  answer at all): retried at once a few times (RECUR_SEND_RETRIES), then held
  like an outage.
* ``OUTAGE``: the destination, or our credentials for it, is not ready: 401,
  403, 404, 410, every 3xx (redirects are not followed), a status HTTP does not
  define, and RECUR_DESTINATION_OUTAGE_STATUSES. The sender keeps its place and
  backs off: nothing after the message goes out, nothing is skipped.
* ``DEAD``: the answer is about this one message (400, 413, 422 and every other
  4xx): the message is set aside in the destination's dead letter, replayably,
  and the destination goes on in order.

A destination can set its own classes (RECUR_DESTINATION_POLICIES), e.g.
``billing:outage=409+423;dead=404,crm:outage=4xx``: ``outage=`` and ``dead=``
take statuses (``409``) and classes (``4xx``) joined by ``+``; a status named
exactly beats a class. 2xx is always SENT.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from enum import Enum
from types import MappingProxyType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from config.settings_fields import Settings


class Verdict(Enum):
    """What one answer of a destination means."""

    SENT = "sent"
    RETRY = "retry"
    OUTAGE = "outage"
    DEAD = "dead"


#: Statuses that say the destination (or its credentials) is not ready.
NOT_READY = frozenset({401, 403, 404, 410})
#: 4xx statuses that may pass by themselves (a timeout, a rate limit).
MAY_PASS = frozenset({408, 429})
#: The classes a policy may give a status.
CLASSES = ("outage", "dead")
_SPLIT = re.compile(r"[\s,+]+")


def verdict(status: int, own: Mapping[int, str] | None = None,
            extra_outage: Collection[int] = ()) -> Verdict:
    """The class of ``status``: the destination's own policy first, then the defaults."""
    if 200 <= status < 300:
        return Verdict.SENT
    if own and status in own:
        return Verdict.OUTAGE if own[status] == "outage" else Verdict.DEAD
    if status in extra_outage or status in NOT_READY or not 400 <= status < 600:
        return Verdict.OUTAGE  # 3xx, and anything HTTP does not define: wait, loudly
    if status >= 500 or status in MAY_PASS:
        return Verdict.RETRY
    return Verdict.DEAD


def verdict_for(cfg: Settings, destination: str, status: int) -> Verdict:
    """The class of ``status`` for ``destination`` under ``cfg``'s settings."""
    return verdict(status, cfg.destination_policies.get(destination),
                   cfg.destination_outage_statuses)


def expand(token: str) -> frozenset[int]:
    """``'409'`` -> {409}; ``'4xx'`` -> 400..499 (3xx to 5xx only: 2xx is always sent)."""
    word = token.strip().lower()
    if re.fullmatch(r"[345]xx", word):
        first = int(word[0]) * 100
        return frozenset(range(first, first + 100))
    if not re.fullmatch(r"\d{3}", word):
        raise ValueError(f"{token!r} is not an HTTP status like 409 or a class like 4xx")
    if not 300 <= int(word) <= 599:
        raise ValueError(f"{word} is not a refusal status (300-599; 2xx is always delivered)")
    return frozenset({int(word)})


def parse_statuses(raw: str) -> tuple[int, ...]:
    """RECUR_DESTINATION_OUTAGE_STATUSES: ``'409,423'``, ``'409 4xx'`` -> sorted statuses."""
    codes: set[int] = set()
    for token in filter(None, _SPLIT.split(raw.strip())):
        codes |= expand(token)
    return tuple(sorted(codes))


def parse_policies(raw: str) -> Mapping[str, Mapping[int, str]]:
    """RECUR_DESTINATION_POLICIES -> {destination: {status: 'outage' | 'dead'}}."""
    policies: dict[str, Mapping[int, str]] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        name, sep, rules = (text.strip() for text in item.partition(":"))
        if not sep or not name or not rules:
            raise ValueError(f"{item!r} is not 'destination:outage=CODES;dead=CODES' (join "
                             f"statuses with '+': outage=409+423)")
        if name in policies:
            raise ValueError(f"destination {name!r} has two policies")
        policies[name] = _parse_rules(name, rules)
    return MappingProxyType(policies)


def _parse_rules(name: str, rules: str) -> Mapping[int, str]:
    broad: dict[int, str] = {}
    exact: dict[int, str] = {}
    for rule in filter(None, (part.strip() for part in rules.split(";"))):
        kind, eq, codes = (text.strip() for text in rule.partition("="))
        tokens = list(filter(None, _SPLIT.split(codes)))
        if not eq or kind.lower() not in CLASSES or not tokens:
            raise ValueError(f"destination {name!r}: {rule!r} is not 'outage=CODES' or "
                             f"'dead=CODES' (e.g. outage=409+4xx)")
        for token in tokens:
            target = broad if "x" in token.lower() else exact
            for code in expand(token):
                if target.setdefault(code, kind.lower()) != kind.lower():
                    raise ValueError(f"destination {name!r}: {code} is both outage and dead")
    return MappingProxyType({**broad, **exact})
