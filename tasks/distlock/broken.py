"""The lock's Redis state when it is not what lock.lua wrote (another program wrote a
key, or a value was overwritten): which key is wrong, named in one line. (Parked
entries that are not jobs: tasks/distlock/unreadable.py.)"""

from __future__ import annotations

import logging
from typing import Any

import redis

from config.errors import LockUnavailable

#: The type lock.lua keeps in each of its KEYS, in their order (lock.lua's header).
TYPES = ("string", "hash", "zset", "zset", "set", "hash", "zset", "string", "hash")
#: Whole-number values: the counter (KEYS[8]) and the mark's fields (KEYS[2]).
NUMBERS = {1: ("started", "done", "gapat")}
COUNTER = 7

log = logging.getLogger("recur.distlock")


class LockRefused(LockUnavailable):
    """Redis answered but refused one user's lock call (a key of the wrong type or
    holding garbage; Redis out of memory is an outage, LockUnavailable): other users'
    calls go on."""


def refusal(client: redis.Redis, keys: tuple[bytes, ...], what: str,
            exc: redis.ResponseError) -> LockRefused:
    """The error for a lock call Redis refused, naming the key that is wrong."""
    said = str(exc).split(" script: ")[0]
    wrong = wrong_key(client, keys)
    why = (f"{wrong} (another program wrote it: fix or delete that key; until then the "
           f"jobs concerned wait in the broker): " if wrong else "")
    return LockRefused(f"Redis: {what}: {why}{said}")


def lease_restored(key: str, kind: str, ttl: float) -> None:
    """One ERROR line for a lock owner key another program wrote as a ``kind`` without an
    expiry: lock.lua gave it one lease (``lease_restored``) and never deletes it, so the
    user's jobs wait at most that lease instead of for ever."""
    log.error("key %s is a %s without an expiry, where the lock keeps a string (another "
              "program wrote it): given one lease (%gs, lease_restored); the user's jobs "
              "run after it lapses", key, kind, ttl)


def wrong_key(client: redis.Redis, keys: tuple[bytes, ...]) -> str:
    """'key K is a T, where the lock keeps a U' (or holds a non-number), or ''."""
    try:
        for i, raw in enumerate(keys[:len(TYPES)]):
            key = raw.decode()
            kind = str(client.type(key))
            if kind not in ("none", TYPES[i]):
                return f"key {key} is a {kind}, where the lock keeps a {TYPES[i]}"
            if i == COUNTER and kind == "string" and not whole(client.get(key)):
                return f"key {key} holds {client.get(key)!r:.40}, not a whole number below 2^53"
            for name in NUMBERS.get(i, ()) if kind == "hash" else ():
                value = client.hget(key, name)
                if value is not None and not whole(value):
                    return (f"key {key} field {name} holds {value!r:.40}, not a whole "
                            f"number below 2^53")
    except redis.RedisError:
        return ""  # the diagnosis is best effort: the call's own error is reported
    return ""


def whole(value: Any) -> bool:
    """Whether ``value`` (a Redis string) is a whole number Lua reads exactly."""
    try:
        return abs(int(str(value))) < 2**53
    except ValueError:
        return False
