"""A call's arguments as the due-jobs row stores them: ``{"args": [...], "kwargs": {...}}``.

Stored compactly, because at tens of millions of rows every byte of ``args``
is most of a row: no spaces, no empty ``"kwargs"``, and a message argument
leaves out what the row already holds in its own columns (its ``id`` when it
is the job key, its ``bucket`` when it is the row's bucket). The commonest
call of all, one message and nothing else, is stored as the JSON array
``[user_id, payload]`` (``[user_id, payload, kind]`` with a kind): the
field names and the wrapper were a third of such a row's ``args``. Reading
puts everything back, and also reads the full form (as sent to the broker).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from config.errors import InvalidMessage


def _strip(message: Any, job_key: str | None, bucket: str | None) -> Any:
    """The message without the fields the row's job_key and bucket columns repeat."""
    if not isinstance(message, dict):
        return message
    out = dict(message)
    if job_key is not None and out.get("id") == job_key:
        del out["id"]
    if bucket is not None and "kind" not in out and out.get("bucket") == bucket:
        del out["bucket"]
    return out


def _restore(message: Any, job_key: str | None, bucket: str | None) -> Any:
    """The message with the fields :func:`_strip` left out put back (first, as sent)."""
    if not isinstance(message, dict):
        return message
    head: dict[str, Any] = {}
    if job_key is not None and "id" not in message:
        head["id"] = job_key
    if bucket is not None and "bucket" not in message and "kind" not in message:
        head["bucket"] = bucket
    return {**head, **message} if head else message


#: The fields of a message in the array form, in their order there.
MESSAGE_ARRAY = ("user_id", "payload", "kind")


def _as_array(message: Any) -> list[Any] | None:
    """The array form of a stripped message, or None when it does not fit one."""
    if (not isinstance(message, dict) or not {"user_id", "payload"} <= message.keys()
            or not message.keys() <= set(MESSAGE_ARRAY)):
        return None
    return [message[name] for name in MESSAGE_ARRAY if name in message]


def encode_call(args: Sequence[Any], kwargs: Mapping[str, Any], retries: int = 0, *,
                job_key: str | None = None, bucket: str | None = None) -> str:
    """The row's ``args`` JSON text; refuses what JSON cannot carry.

    With ``job_key``/``bucket`` (the row's), a message first argument leaves
    out the fields those columns repeat; :func:`decode_call` given the same
    puts them back.
    """
    call = list(args)
    if call:
        call[0] = _strip(call[0], job_key, bucket)
    single = _as_array(call[0]) if len(call) == 1 and not kwargs and not retries else None
    body: Any = {"args": call} if single is None else single
    if kwargs:
        body["kwargs"] = dict(kwargs)
    if retries:
        body["retries"] = retries
    try:
        return json.dumps(body, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidMessage("args", f"not JSON-serialisable ({exc})") from exc
    except RecursionError:
        raise InvalidMessage("args", "nested too deeply to encode as JSON") from None


def decode_call(text: str, job_key: str | None = None, bucket: str | None = None
                ) -> tuple[list[Any], dict[str, Any], int]:
    """(args, kwargs, retries) from a row's ``args`` text (compact or full form).

    Text that is not one of those forms (a row another writer put in the store)
    raises :class:`InvalidMessage` for ``args``, whatever is wrong with it.
    """
    try:
        return _decode(text, job_key, bucket)
    except (ValueError, TypeError, AttributeError, KeyError, OverflowError,
            RecursionError) as exc:
        raise InvalidMessage("args", f"the stored call cannot be decoded "
                             f"({type(exc).__name__}: {str(exc)[:120]})") from exc


def _decode(text: str, job_key: str | None, bucket: str | None
            ) -> tuple[list[Any], dict[str, Any], int]:
    body = json.loads(text)
    if isinstance(body, list):
        if not body:
            raise ValueError("an empty array is not a message")
        return [_restore(dict(zip(MESSAGE_ARRAY, body, strict=False)), job_key, bucket)], {}, 0
    if not isinstance(body, dict):
        raise TypeError(f"a JSON {type(body).__name__} is not a call")
    args, kwargs, retries = body.get("args", []), body.get("kwargs", {}), body.get("retries", 0)
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise TypeError("args must be an array and kwargs an object")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValueError(f"retries must be a whole number >= 0, got {retries!r:.40}")
    args = list(args)
    if args:
        args[0] = _restore(args[0], job_key, bucket)
    return args, dict(kwargs), retries


def message_of(args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """The message argument of a message task call (as the router finds it)."""
    if args:
        return args[0]
    if "message" in kwargs:
        return kwargs["message"]
    raise InvalidMessage("message", "a message task needs a message as its first argument")
