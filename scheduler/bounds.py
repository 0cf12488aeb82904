"""What one due-jobs row may hold: checked at ``apply_async``, and again before publishing.

A row the store or the broker cannot take must be refused when it is written,
by name, on every store alike: otherwise PostgreSQL refuses it later as an
index or encoding error (read as an outage, so retried forever) and SQLite
takes it, only for the broker to refuse its message (a connection closed with
``frame_too_large``, claimed again every pass). So a job key is a non-empty
string of printable characters of at most ``RECUR_MAX_JOB_KEY_BYTES`` UTF-8
bytes, and the encoded call (args and kwargs as stored) is at most
``RECUR_MAX_CALL_BYTES`` with no NUL character and no lone surrogate in any of
its strings (PostgreSQL's json cannot hold either). Rows that other writers put
in the store are checked again by the scheduler (:func:`row_problem`): one
that breaks a bound is set aside with the reason, never published.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from config.errors import InvalidSchedule
from config.settings import Settings
from config.text import CONTROL, NUL_REASON, is_unicode

#: Escapes json.dumps writes for a NUL or a surrogate: only a call holding one is walked
#: (both begin ``\\u``: most calls hold none, one scan tells).
SUSPECT = ("\\u0000", "\\ud")
#: Largest ``retries`` a stored call may carry (a signed 32-bit header integer).
MAX_RETRIES = 2**31 - 1


@dataclass(frozen=True)
class Limits:
    """The size bounds of a stored row (RECUR_MAX_JOB_KEY_BYTES, RECUR_MAX_CALL_BYTES)."""

    job_key_bytes: int = 512
    call_bytes: int = 65536

    @classmethod
    def of(cls, cfg: Settings) -> Limits:
        return cls(cfg.max_job_key_bytes, cfg.max_call_bytes)


def utf8_size(text: str) -> int:
    """Bytes of ``text`` in UTF-8 (a lone surrogate counted as the 3 bytes it would take)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def job_key_problem(key: Any, limits: Limits, name: str = "job_key") -> str | None:
    """Why ``key`` cannot be a job key ("job_key: ..."), or None when it can."""
    if not isinstance(key, str):
        return f"{name} must be a string, got {type(key).__name__}"
    if not key.strip():
        return f"{name} must be a non-empty string, got {key!r}"
    problem = key_size_problem(key, limits, name)
    if problem is not None or (key.isascii() and key.isprintable()):  # the usual key: no
        return problem  # control character, no surrogate, without a regex per key
    bad = CONTROL.search(key)
    if bad is not None:
        return (f"{name}: control character U+{ord(bad.group()):04X} at position {bad.start()}"
                " (a key holds printable characters only)")
    if not is_unicode(key):
        return f"{name}: not valid Unicode (a lone surrogate)"
    return None


def check_job_key(key: Any, limits: Limits, name: str = "job_key") -> str:
    """``key`` if it can be a job key; else :class:`InvalidSchedule` naming what is wrong."""
    problem = job_key_problem(key, limits, name)
    if problem is not None:
        raise InvalidSchedule(problem)
    return str(key)


def key_size_problem(key: str, limits: Limits, name: str = "job_key") -> str | None:
    """Why ``key`` is too long to be a job key, or None."""
    size = utf8_size(key)
    if size > limits.job_key_bytes:
        return f"{name}: {size} bytes, at most {limits.job_key_bytes} (RECUR_MAX_JOB_KEY_BYTES)"
    return None


def call_size_problem(text: str, limits: Limits) -> str | None:
    """Why the encoded call ``text`` is too large to store, or None."""
    size = utf8_size(text)
    if size > limits.call_bytes:
        return (f"args: {size} bytes encoded (args and kwargs as stored), at most "
                f"{limits.call_bytes} (RECUR_MAX_CALL_BYTES)")
    return None


def check_call(text: str, args: list[Any], kwargs: Mapping[str, Any], limits: Limits) -> None:
    """Refuse an encoded call the store cannot hold: too large, or a string in it with a
    NUL or a lone surrogate (PostgreSQL's json refuses both; only a call whose text
    shows such an escape is walked)."""
    problem = call_size_problem(text, limits)
    if problem is None and "\\u" in text and any(escape in text for escape in SUSPECT):
        problem = string_problem(args, kwargs)
    if problem is not None:
        raise InvalidSchedule(problem)


def check_retries(value: Any) -> int:
    """The call's ``retries`` option as a whole number 0..MAX_RETRIES."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_RETRIES:
        raise InvalidSchedule(f"retries must be a whole number 0..{MAX_RETRIES}, got {value!r:.60}")
    return value


def string_problem(args: list[Any], kwargs: Mapping[str, Any]) -> str | None:
    """The first string of the call (a key or a value) that the store cannot hold, named
    by its path (``args[0].payload.name``), or None."""
    todo: list[tuple[str, Any]] = [(f"kwargs.{k}", v)
                                   for k, v in reversed(list(kwargs.items()))]
    todo += [(f"args[{i}]", v) for i, v in reversed(list(enumerate(args)))]
    while todo:
        path, value = todo.pop()
        if isinstance(value, str):
            problem = _text_problem(value)
            if problem:
                return f"{path}: {problem}"
        elif isinstance(value, Mapping):
            for key in value:
                problem = _text_problem(key) if isinstance(key, str) else None
                if problem:
                    return f"{path}: a key {problem}"
            todo += [(f"{path}.{k}", v) for k, v in reversed(list(value.items()))]
        elif isinstance(value, list | tuple):
            todo += [(f"{path}[{i}]", v) for i, v in reversed(list(enumerate(value)))]
    return None


def _text_problem(text: str) -> str | None:
    if "\x00" in text:
        return NUL_REASON
    if not is_unicode(text):
        return "is not valid Unicode (a lone surrogate), which PostgreSQL cannot store"
    return None


def row_problem(job_key: str, args: str, limits: Limits) -> str | None:
    """Why a stored row must not be published (the size bounds apply_async keeps), or
    None: a row another writer put in the store is checked before its message is built."""
    return key_size_problem(job_key, limits) or call_size_problem(args, limits)


def stored_text_problem(text: str) -> str | None:
    """Why a stored call's text holds a string no store may (a NUL or a lone surrogate,
    as an escape: SQLite takes what another writer put there), or None. Only a text
    showing such an escape is parsed; text that is not JSON is left to the decoder."""
    if not any(escape in text for escape in SUSPECT):
        return None
    try:
        body = json.loads(text)
    except (ValueError, RecursionError):
        return None
    problem = string_problem(body if isinstance(body, list) else [body], {})
    return None if problem is None else f"the stored call: {problem}"
