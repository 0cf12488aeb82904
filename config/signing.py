"""Optional HMAC signatures of recur's control headers (RECUR_SIGNING_KEY).

Control headers steer what a worker does with a message: ``recur_dispatch``
(which due-jobs row it is a copy of, and may settle), ``recur_lock_seq`` and
``recur_lock_since`` (its place in its user's line). Anyone who can publish to
the broker can write them. With a signing key, every recur publisher adds the
header ``recur_sig``: one HMAC-SHA256 per control header it carries, over
the header's name and value and the job it belongs to (task id and task
name), so a signature cannot be moved to another header, value or job. A
worker refuses (dead-letters, with the reason) a message whose control header
is unsigned or badly signed. Each header has its own signature because a
header is checked where it is read, and a job run from its parked copy (the
lock's chain) carries the dispatch header of its delivery but a place in line
given on arrival.

What is not covered: the task's arguments (a message is validated as input
anyway), and a whole signed message copied as is, which is a duplicate of that
very job (the dispatch token and the lock's numbers drop duplicates).
Without a key nothing is signed or checked.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any

from config.errors import InvalidControlHeader

#: The header holding the signatures: ``name=hex;name=hex``.
SIG_HEADER = "recur_sig"
#: The control headers signed when present, in the order they are listed.
SIGNED = ("recur_dispatch", "recur_lock_seq", "recur_lock_since")
#: Shortest key accepted (a random key: `openssl rand -hex 32` gives 64 characters).
MIN_KEY_LENGTH = 16
#: Hex digits kept of each HMAC-SHA256 (128 bits: forging one is 2**128 tries).
DIGITS = 32


def check_key(key: str) -> None:
    """A signing key is empty (off) or long enough (ValueError naming the length)."""
    if key and len(key) < MIN_KEY_LENGTH:
        raise ValueError(f"must be empty (signing off) or at least {MIN_KEY_LENGTH} "
                         f"characters, got {len(key)} (e.g. `openssl rand -hex 32`)")


def mac(key: str, task_id: str, task: str, name: str, value: Any) -> str:
    """The signature of header ``name`` = ``value`` of job ``task_id`` (task ``task``)."""
    text = json.dumps([task_id, task, name, value], separators=(",", ":"), sort_keys=True,
                      default=str)
    return hmac.new(key.encode(), text.encode(), hashlib.sha256).hexdigest()[:DIGITS]


def sign(headers: dict[str, Any], key: str) -> None:
    """Add ``recur_sig`` for every control header in ``headers`` (Celery protocol 2
    message headers: ``id`` and ``task`` name the job); without a key, nothing."""
    if not key:
        return
    present = [name for name in SIGNED if headers.get(name) is not None]
    if not present:
        headers.pop(SIG_HEADER, None)
        return
    task_id, task = str(headers.get("id", "")), str(headers.get("task", ""))
    headers[SIG_HEADER] = ";".join(
        f"{name}={mac(key, task_id, task, name, headers[name])}" for name in present)


def signatures(value: Any) -> dict[str, str]:
    """The ``recur_sig`` header's signatures by header name (malformed: none)."""
    if not isinstance(value, str):
        return {}
    pairs = (part.partition("=") for part in value.split(";"))
    return {name: digest for name, sep, digest in pairs if sep}


def verify(key: str, task_id: Any, task: Any, name: str, value: Any,
           signature_header: Any) -> None:
    """Refuse control header ``name`` = ``value`` unless ``recur_sig`` signs it for this
    job (InvalidControlHeader: the worker dead-letters the message); no key: no check."""
    if not key or value is None:
        return
    given = signatures(signature_header).get(name)
    if given is None:
        raise InvalidControlHeader(name, "unsigned, and RECUR_SIGNING_KEY is set: a "
                                   "message not published by recur (or by a recur without "
                                   "the key) is refused")
    expected = mac(key, str(task_id or ""), str(task or ""), name, value)
    if not hmac.compare_digest(given, expected):
        raise InvalidControlHeader(name, "bad signature (forged, altered, or signed with "
                                   "another RECUR_SIGNING_KEY)")


def verify_headers(key: str, headers: Mapping[str, Any], name: str) -> None:
    """:func:`verify` for a raw message's headers (a dead letter's, say)."""
    verify(key, headers.get("id"), headers.get("task"), name, headers.get(name),
           headers.get(SIG_HEADER))
