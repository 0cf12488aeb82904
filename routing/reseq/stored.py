"""Values the resequencer reads from Redis outside its scripts, checked: a value
another program wrote there is one clear error naming its key, not a crash."""

from __future__ import annotations

import redis

from config.errors import ServiceUnavailable


def stored_seq(client: redis.Redis, key: str) -> int:
    """The sequence number kept at ``key`` (0: none yet); ServiceUnavailable naming the
    key when it holds anything else (the destination's messages wait, none is lost)."""
    value = client.get(key)
    try:
        return int(value or 0)
    except ValueError:
        raise ServiceUnavailable(f"Redis: key {key} holds {value!r:.40}, no sequence "
                                 f"number: another program wrote it (set it to the last "
                                 f"one sent)") from None
