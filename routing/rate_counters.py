"""``@rate_limit``'s counters in Redis, as read by ``recur status`` and the benchmarks.

They live below ``tasks`` (tasks/flow/limiter.py writes them through its GCRA script
and re-exports these readers) so ``recur status`` reads them without importing the
Celery app."""

from __future__ import annotations

import redis

from config import keys
from routing.redis_client import redis_errors


def counters(client: redis.Redis, prefix: str) -> dict[str, dict[str, int]]:
    """Per bucket: ``deferred`` (jobs refused, ever) and ``waiting`` (jobs holding a
    reserved slot now; an estimate: a slot whose job never came back expires with
    its key's hash, not from this count). One HGETALL: cheap for ``recur status``."""
    out: dict[str, dict[str, int]] = {}
    for (kind, bucket), count in all_counts(client, prefix).items():
        if kind in ("deferred", "waiting"):
            out.setdefault(bucket, {"deferred": 0, "waiting": 0})[kind] = max(0, count)
    return out


def all_counts(client: redis.Redis, prefix: str) -> dict[tuple[str, str], int]:
    """Every counter of the script's hash by (kind, bucket): deferred, waiting, busy
    (deliveries that did not start their job), slotted (jobs given a later slot when
    published). Fields that are not the script's are left out."""
    with redis_errors("rate limit counters"):
        raw = client.hgetall(keys.rate_stats(prefix))
    out: dict[tuple[str, str], int] = {}
    for field, value in raw.items():
        kind, _, bucket = str(field).partition(":")
        try:
            out[(kind, bucket)] = int(value)
        except ValueError:
            continue  # not the script's: a count is an integer
    return out
