"""The message contract and the one function that validates it.

A message is a JSON object::

    {"id": str, "user_id": str, "bucket": "short"|"medium"|"long", "payload": <JSON>}

where ``bucket`` may be replaced by ``"kind": str`` (mapped to a bucket by
the settings). Every entry point (``apply_async``, the router, the worker, the
seed job) calls :func:`validate_message`, so bad input is refused the same way
everywhere, with an error naming the field that is wrong.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

from config.errors import InvalidMessage, UnknownBucket
from config.settings import Settings, settings
from config.text import LONE_SURROGATE, is_unicode

REQUIRED_STRINGS = ("id", "user_id")
KNOWN_FIELDS = frozenset({"id", "user_id", "bucket", "kind", "payload"})
MAX_ID_LENGTH = 200
#: Deepest nesting of lists and objects in a payload: a worker hands a message to its
#: pool (pickle) and to the result backend, whose recursion gives out far sooner than
#: JSON's, and a payload that fails there stops the worker, not the message.
MAX_PAYLOAD_DEPTH = 100
#: The containers JSON's encoder takes (a payload it encoded holds no other).
CONTAINERS = (dict, list, tuple)
#: The one compact JSON encoder of payloads and stored calls (scheduler/wire.py), made
#: once: ``json.dumps`` with options makes an encoder per call, half the cost of a small one.
COMPACT_JSON = json.JSONEncoder(allow_nan=False, separators=(",", ":"))


class Message(TypedDict):
    """A validated message, with its bucket resolved."""

    id: str
    user_id: str
    bucket: str
    payload: Any
    kind: NotRequired[str]


def _require_string(message: Mapping[str, Any], name: str) -> str:
    value = message.get(name)
    if value is None:
        raise InvalidMessage(name, "missing")
    if not isinstance(value, str) or not value.strip():
        raise InvalidMessage(name, f"must be a non-empty string, got {value!r:.60}")
    if len(value) > MAX_ID_LENGTH:
        raise InvalidMessage(name, f"longer than {MAX_ID_LENGTH} characters")
    if not is_unicode(value):
        raise InvalidMessage(name, LONE_SURROGATE)
    return value




def encoded_payload_size(payload: Any) -> int:
    """Bytes of the payload as JSON; raises InvalidMessage if it is not JSON."""
    return len(encoded_payload(payload))


def encoded_payload(payload: Any) -> str:
    """The payload as compact JSON (ASCII: its length is its size in bytes); raises
    InvalidMessage if it is not JSON, or not one JSON would carry unchanged."""
    try:
        text = COMPACT_JSON.encode(payload)
    except (TypeError, ValueError) as exc:
        raise InvalidMessage("payload", f"not a JSON value ({exc})") from exc
    except RecursionError:
        raise InvalidMessage("payload", "nested too deeply to encode as JSON") from None
    deep = text.count("[") + text.count("{") > MAX_PAYLOAD_DEPTH
    if deep or "{" in text:  # only then can a key or the nesting be wrong
        problem = shape_problem(payload)
        if problem is not None:
            raise InvalidMessage("payload", problem)
    if "\\ud" in text and not is_unicode(json.dumps(payload, ensure_ascii=False)):
        raise InvalidMessage("payload", LONE_SURROGATE)  # escaped above as \udXXX
    return text


def shape_problem(payload: Any) -> str | None:
    """What JSON text hides about a payload it encoded, in one walk: a key that is no string
    (JSON would make it one: ``{1: "a", "1": "b"}`` keeps only one) or nesting deeper than
    MAX_PAYLOAD_DEPTH. Its containers are dicts, lists and tuples (all the encoder takes)."""
    todo: list[tuple[Any, int]] = [(payload, 1)] if isinstance(payload, CONTAINERS) else []
    while todo:
        value, depth = todo.pop()
        if isinstance(value, dict):
            for key in value:
                if not isinstance(key, str):
                    return (f"an object key must be a string, got {key!r:.60} "
                            f"({type(key).__name__})")
            value = value.values()
        if depth > MAX_PAYLOAD_DEPTH:
            return f"nested more than {MAX_PAYLOAD_DEPTH} levels deep"
        todo += [(item, depth + 1) for item in value if isinstance(item, CONTAINERS)]
    return None


def too_deep(payload: Any, limit: int = MAX_PAYLOAD_DEPTH) -> bool:
    """Whether lists and objects nest more than ``limit`` levels in ``payload``."""
    todo = [(payload, 1)]
    while todo:
        value, depth = todo.pop()
        if isinstance(value, Mapping | list | tuple):
            if depth > limit:
                return True
            items = value.values() if isinstance(value, Mapping) else value
            todo.extend((item, depth + 1) for item in items)
    return False


def resolve_bucket(message: Mapping[str, Any], cfg: Settings) -> str:
    """The bucket a message runs in: its explicit ``bucket`` or its ``kind``'s."""
    bucket, kind = message.get("bucket"), message.get("kind")
    if bucket is not None and kind is not None:
        raise InvalidMessage("bucket", "give either 'bucket' or 'kind', not both")
    if bucket is not None:
        if not isinstance(bucket, str) or bucket not in cfg.buckets.by_name:
            raise UnknownBucket("bucket", f"unknown bucket {bucket!r:.60} "
                                f"(known: {', '.join(cfg.buckets.names)})")
        return str(bucket)
    if kind is not None:
        if not isinstance(kind, str) or kind not in cfg.kinds:
            raise UnknownBucket("kind", f"unknown kind {kind!r:.60} "
                                f"(known: {', '.join(sorted(cfg.kinds))})")
        return cfg.kinds[kind]
    raise InvalidMessage("bucket", "missing: give 'bucket' or 'kind'")


def validate_message(message: Any, cfg: Settings | None = None) -> Message:
    """Check ``message`` against the contract and return it with its bucket.

    Raises :class:`InvalidMessage` (or :class:`UnknownBucket`) naming the field.
    """
    return validate_encoded(message, cfg)[0]


def validate_encoded(message: Any, cfg: Settings | None = None) -> tuple[Message, str]:
    """:func:`validate_message`, and the payload's compact JSON text the check made: a
    caller that stores the message builds on it rather than encode the payload again."""
    cfg = cfg or settings()
    if not isinstance(message, Mapping):
        raise InvalidMessage("message", f"must be a JSON object, got {type(message).__name__}")
    if not message.keys() <= KNOWN_FIELDS:
        unknown = set(message) - KNOWN_FIELDS
        raise InvalidMessage(min(map(str, unknown)), f"unknown field (allowed: "
                             f"{', '.join(sorted(KNOWN_FIELDS))})")
    ident = _require_string(message, "id")
    user_id = _require_string(message, "user_id")
    bucket = resolve_bucket(message, cfg)
    if "payload" not in message:
        raise InvalidMessage("payload", "missing (use null for no payload)")
    text = encoded_payload(message["payload"])
    size = len(text)
    if size > cfg.max_payload_bytes:
        raise InvalidMessage("payload", f"{size} bytes encoded, over the limit of "
                             f"{cfg.max_payload_bytes} (RECUR_MAX_PAYLOAD_BYTES)")
    valid = Message(id=ident, user_id=user_id, bucket=bucket, payload=message["payload"])
    if "kind" in message:
        valid["kind"] = message["kind"]
    return valid, text
