"""Text that every service can hold: the one test of a string's Unicode.

A lone surrogate (an undecodable byte of an argument or environment value, or ``"\\ud800"``
written by a producer) is a ``str`` that no UTF-8 encoder takes: PostgreSQL, the broker's
JSON and Redis keys all refuse it, each with a traceback of its own. Every edge that
takes text asks here first, so the refusal is one line naming the field.
"""

from __future__ import annotations

import re

#: Why a text with a lone surrogate is refused on every path (the store's UTF-8 refuses it,
#: a Redis key cannot name it), not only when it is stored.
LONE_SURROGATE = "holds a lone surrogate: not valid Unicode, so it cannot be stored or sent"

#: Control characters (C0, DEL, C1): no job key holds one (scheduler/bounds.py), so neither
#: does a recurring message's id (routing/recurrence.py).
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
#: Why a string with a NUL cannot be stored (the seed's transform says it alike).
NUL_REASON = "contains a NUL character (U+0000), which PostgreSQL cannot store"


def is_unicode(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (False: it holds a lone surrogate)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def visible(text: str, width: int | None = None) -> str:
    """``text`` as a terminal line may show it: each control or other unprintable character
    as its escape (``\\x1b``), so a job key another writer put in the store cannot move the
    cursor, clear the screen or split a listing's line. With ``width``, a longer text is
    cut as :func:`brief` cuts (a 100 kB key stays one readable line)."""
    if width is not None:
        text = _cut(text, width)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def brief(value: object, width: int = 60) -> str:
    """``value`` for an error line: its repr cut to ``width`` characters. An integer too
    long to print (Python refuses past 4,300 digits) is named by its size instead."""
    try:
        shown = repr(value)
    except ValueError:
        size = value.bit_length() if isinstance(value, int) else 0
        return f"an integer of {size} bits"
    return _cut(shown, width)


def _cut(text: str, width: int) -> str:
    """The one cut of a shown value: at most ``width`` characters, the last an ellipsis."""
    return text if len(text) <= width else text[:width - 1] + "…"
