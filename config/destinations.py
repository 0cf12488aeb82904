"""RECUR_DESTINATIONS: the resequencer's destinations, each an HTTP POST target with an
optional rate of its own.

::

    RECUR_DESTINATIONS="billing:http://billing.internal/in rate=10/s burst=5,crm:https://crm/x"

An item is ``name:url``, then optionally ``rate=<n>/<s|m|h>`` and ``burst=<n>``
(separated by spaces: a URL holds none). A destination with a rate is never sent more
than that (routing/reseq/pace.py); without one it is sent as fast as it answers.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from urllib.parse import urlsplit

from config.errors import InvalidArgument, InvalidRateLimit
from config.rates import Rate, parse_rate
from config.redact import masked

#: A destination's name: part of its Redis keys (a hash tag) and of its dead-letter queue.
DESTINATION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
#: What DESTINATION_NAME allows, for the lines that refuse a name.
NAME_RULE = "letters, digits and '_.-', at most 64"
#: What may follow a destination's URL.
OPTIONS = ("rate", "burst")



def check_destination_arg(name: str, option: str = "") -> None:
    """InvalidArgument unless a command's ``name`` (given as ``option``) is a destination
    name: one the settings could never hold would only look up nothing."""
    if not DESTINATION_NAME.fullmatch(name):
        label = f"{option} " if option else ""
        raise InvalidArgument(f"{label}{name[:70]!r} is no destination name ({NAME_RULE})")

class Destinations(Mapping[str, str]):
    """Each destination's URL by name (read-only, as every mapping setting is), and the
    rate of those that have one."""

    __slots__ = ("_urls", "rates")

    def __init__(self, urls: Mapping[str, str] | None = None,
                 rates: Mapping[str, Rate] | None = None) -> None:
        self._urls: Mapping[str, str] = MappingProxyType(dict(urls or {}))
        self.rates: Mapping[str, Rate] = MappingProxyType(dict(rates or {}))

    def __getitem__(self, name: str) -> str:
        return self._urls[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._urls)

    def __len__(self) -> int:
        return len(self._urls)

    def __repr__(self) -> str:
        return f"Destinations({dict(self._urls)!r}, rates={dict(self.rates)!r})"


def rate_of(destinations: Mapping[str, str], name: str) -> Rate | None:
    """The rate ``name`` is limited to (None: none; a plain mapping has no rates)."""
    if isinstance(destinations, Destinations):
        return destinations.rates.get(name)
    return None


def parse_destinations(raw: str) -> Destinations:
    """``'name:url [rate=10/s] [burst=5],...'``; ValueError naming the destination and
    what is wrong."""
    urls: dict[str, str] = {}
    rates: dict[str, Rate] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        name, sep, rest = (text.strip() for text in item.partition(":"))
        url, *options = rest.split() or [""]
        if not sep or not name or not url.startswith(("http://", "https://")):
            raise ValueError(f"{item[:100]!r} is not 'name:http(s)://...' (then, optionally, "
                             "rate=10/s burst=N)")
        if not DESTINATION_NAME.fullmatch(name):
            raise ValueError(f"destination name {name[:70]!r} may hold only {NAME_RULE} (it "
                             "names Redis keys and a dead-letter queue)")
        if name in urls:  # the later one would silently replace the earlier
            raise ValueError(f"destination {name!r} is listed twice")
        urls[name] = _checked_url(name, url)
        rate = _rate(name, options)
        if rate is not None:
            rates[name] = rate
        else:
            rates.pop(name, None)
    return Destinations(urls, rates)


def _checked_url(name: str, url: str) -> str:
    """``url`` if the sender can POST to it; else ValueError saying why, at start, instead
    of a destination that fails every send (no host, a port past 65535, a host name that
    cannot be encoded). The standard library's parser and IDNA codec: httpx, the sender's
    own, costs every process ~5 MB, and only the outbound worker sends."""
    problem = _url_problem(url)
    if problem is not None:
        raise ValueError(f"destination {name!r}: URL {masked(url)[:100]!r} {problem}")
    return url


def _url_problem(url: str) -> str | None:
    if not url.isprintable():
        return "holds a control character"
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # an unclosed IPv6 bracket
        return f"cannot be read ({exc})"
    host = parts.hostname
    if not host or any(c.isspace() for c in host):
        return "has no host" if not host else "has a space in its host"
    port = parts.netloc.rpartition("@")[2].rpartition("]")[2].partition(":")[2]
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        return f"has port {port[:10]}, not 1-65535"
    try:  # what the resolver does: labels of 1-63 bytes, punycode that round-trips
        host.encode("idna").decode("idna")
    except UnicodeError as exc:
        return f"has a host name no resolver takes ({exc})"
    return None


def _rate(name: str, options: list[str]) -> Rate | None:
    """The rate the options after a destination's URL give it (None: no ``rate=``)."""
    given: dict[str, str] = {}
    for option in options:
        key, eq, value = option.partition("=")
        if not eq or key not in OPTIONS or not value:
            raise ValueError(f"destination {name!r}: {option[:60]!r} is not rate=<n>/<s|m|h> "
                             "or burst=<n>")
        if key in given:
            raise ValueError(f"destination {name!r}: {key}= given twice")
        given[key] = value
    if "rate" not in given:
        if "burst" in given:
            raise ValueError(f"destination {name!r}: burst= needs a rate= (e.g. rate=10/s "
                             "burst=5)")
        return None
    try:
        burst = _whole(given["burst"]) if "burst" in given else None
        return parse_rate(given["rate"], burst)
    except InvalidRateLimit as exc:
        raise ValueError(f"destination {name!r}: {exc}") from None


def _whole(text: str) -> int | str:
    """``burst=`` as a number when it is one (parse_rate says what is wrong otherwise)."""
    return int(text) if text.isdigit() else text
