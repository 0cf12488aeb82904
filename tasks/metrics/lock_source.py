"""The per-user lock's figures, read through one small adapter.

The lock keeps its event counters in the Redis hash ``<prefix>:lock:stats`` and
the users waiting for a look in the sorted set ``<prefix>:lock:wake``
(docs/distlock.md). The lock's design may change; only this module knows
where its figures are, so the exporter and the dashboard stay as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from config import keys


@dataclass(frozen=True)
class LockFigures:
    """Event counters summed over every worker, and the users with parked jobs."""

    events: dict[str, int]
    waiting_users: int


def read_lock_figures(client: redis.Redis, prefix: str) -> LockFigures:
    """Two O(1)/O(fields) reads in one round trip."""
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(keys.lock_stats(prefix))
    pipe.zcard(keys.lock_wake(prefix))
    raw, waiting = pipe.execute()
    return LockFigures({str(k): int(v) for k, v in raw.items()}, int(waiting))
