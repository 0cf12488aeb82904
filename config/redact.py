"""Secrets inside configuration values: the one masker, and the placeholder check.

Every line recur prints or logs that may hold a URL goes through :func:`masked`
(``config.errors`` for errors, ``config.settings`` for bad settings and
``recur settings``). It finds a URL's password in each form a driver accepts:
``user:pass@host``, ``:pass@host``, ``?password=…``/``&password=…`` (and
``token``, ``secret``, ``api_key``, …), and in lists of URLs (``,``/``;``
separated). It errs towards masking too much: a password holding ``@`` or
``/`` is masked up to the host's ``@``.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterator
from urllib.parse import unquote

MASK = "***"
SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
#: ``password=…`` and its kin, after a URL's ``?``/``&``/``;`` or in a ``key=value`` DSN; the
#: value ends at ``&``, ``#``, a space, the next URL of a list, or the punctuation that
#: closes the URL in a sentence (``…?password=x': down``).
_PARAM = re.compile(
    r"(?i)(?:^|(?<=[?&;\s,'\"(]))[\w.\-]*(?:pass(?:word|wd)?|pwd|secret|token|api[_-]?key)="
    r"['\"]?(?P<value>[^&\s#]*?)(?=[&\s#]|[,;][A-Za-z][A-Za-z0-9+.\-]*://|[:;,'\")\]]+(?:\s|$)|$)")
#: The placeholders of .env.example (``change-me-…``) and their spellings.
_PLACEHOLDER = re.compile(r"(?i)^\s*change[-_ ]?me")


#: The letters a URL scheme starts with, and the characters it holds (as SCHEME says).
_LETTERS = frozenset(string.ascii_letters)
_SCHEME_CHARS = _LETTERS | frozenset(string.digits + "+.-")


def scheme_ends(text: str) -> list[int]:
    """Where each ``scheme://`` of ``text`` ends: what ``SCHEME.finditer`` finds, in one
    pass (the regex tries every letter of a long word again: 100,000 letters, 20 s)."""
    ends: list[int] = []
    floor = 0
    while (colon := text.find("://", floor)) >= 0:
        start = colon
        while start > floor and text[start - 1] in _SCHEME_CHARS:
            start -= 1
        while start < colon and text[start] not in _LETTERS:  # a scheme starts with one
            start += 1
        if start < colon:
            ends.append(colon + 3)
            floor = colon + 3
        else:
            floor = colon + 1
    return ends


def _userinfo_spans(text: str, stop_at_space: bool) -> Iterator[tuple[int, int]]:
    """Spans of the passwords in every ``scheme://user:password@`` of ``text``."""
    starts = scheme_ends(text)
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(text)
        if stop_at_space:
            space = re.search(r"\s", text[start:end])
            end = start + space.start() if space else end
        at = text.rfind("@", start, end)
        colon = text.find(":", start, at) if at >= 0 else -1
        if colon >= 0 and colon + 1 < at:
            yield colon + 1, at


def _spans(text: str, stop_at_space: bool) -> list[tuple[int, int]]:
    """Every secret's span, overlaps merged, in order."""
    found = sorted([*_userinfo_spans(text, stop_at_space),
                    *(m.span("value") for m in _PARAM.finditer(text) if m.group("value"))])
    merged: list[tuple[int, int]] = []
    for start, end in found:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def masked(text: str, stop_at_space: bool = True) -> str:
    """``text`` with the password of every URL in it replaced by ``***``.

    ``stop_at_space=False`` reads ``text`` as one value (a setting), where a
    space cannot end a URL and so cannot leave the rest of a password shown.
    """
    out, last = [], 0
    for start, end in _spans(text, stop_at_space):
        out += [text[last:start], MASK]
        last = end
    return "".join([*out, text[last:]])


def passwords(text: str) -> list[str]:
    """The passwords in a value (URLs and ``password=`` parameters), percent-decoded."""
    return [unquote(text[start:end]) for start, end in _spans(text, False)]


def is_placeholder(secret: str) -> bool:
    """Whether ``secret`` is a placeholder like ``change-me-flower`` (never a real one)."""
    return bool(_PLACEHOLDER.match(unquote(secret)))
