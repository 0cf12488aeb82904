"""A call's arguments as the due-jobs row stores them: ``{"args": [...], "kwargs": {...}}``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from config.errors import InvalidMessage


def encode_call(args: Sequence[Any], kwargs: Mapping[str, Any], retries: int = 0) -> str:
    """The row's ``args`` JSON text; refuses what JSON cannot carry."""
    body: dict[str, Any] = {"args": list(args), "kwargs": dict(kwargs)}
    if retries:
        body["retries"] = retries
    try:
        return json.dumps(body, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidMessage("args", f"not JSON-serialisable ({exc})") from exc


def decode_call(text: str) -> tuple[list[Any], dict[str, Any], int]:
    """(args, kwargs, retries) from a row's ``args`` text."""
    body = json.loads(text)
    return list(body.get("args", [])), dict(body.get("kwargs", {})), int(body.get("retries", 0))


def message_of(args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """The message argument of a message task call (as the router finds it)."""
    if args:
        return args[0]
    if "message" in kwargs:
        return kwargs["message"]
    raise InvalidMessage("message", "a message task needs a message as its first argument")
