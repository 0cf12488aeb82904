"""The Redis side of ``@rate_limit``: one GCRA script call per job (gcra.lua)."""

from __future__ import annotations

from dataclasses import dataclass

import redis

from config import keys
from config.errors import ServiceUnavailable
from routing.redis_client import Script, redis_errors
from tasks.flow.rates import Rate

GCRA = Script.of_file("tasks.flow", "gcra.lua")


@dataclass(frozen=True)
class Decision:
    """A job may start now, or must wait ``wait`` seconds for the slot it holds."""

    allowed: bool
    wait: float
    #: This call reserved a new slot (the job was refused for the first time).
    reserved: bool


def take(client: redis.Redis, prefix: str, key: str, job: str, bucket: str,
         rate: Rate) -> Decision:
    """Start ``job`` of ``key`` now, or reserve its slot (the next free one, behind
    every job of its key refused before it); ServiceUnavailable if Redis fails."""
    with redis_errors("rate limit of %s", key, error=ServiceUnavailable):
        allowed, wait_ms, reserved = GCRA(
            client, [keys.rate_limit(prefix, key), keys.rate_stats(prefix)],
            repr(rate.interval_ms), rate.burst, job, bucket)
    return Decision(bool(allowed), int(wait_ms) / 1000.0, bool(reserved))


def counters(client: redis.Redis, prefix: str) -> dict[str, dict[str, int]]:
    """Per bucket: ``deferred`` (jobs refused, ever) and ``waiting`` (jobs holding a
    reserved slot now; an estimate: a slot whose job never came back expires with
    its key's hash, not from this count). One HGETALL: cheap for ``recur status``."""
    with redis_errors("rate limit counters"):
        raw = client.hgetall(keys.rate_stats(prefix))
    out: dict[str, dict[str, int]] = {}
    for field, value in raw.items():
        kind, _, bucket = str(field).partition(":")
        try:
            count = int(value)
        except ValueError:
            continue  # not the script's: a count is an integer
        if kind in ("deferred", "waiting"):
            out.setdefault(bucket, {"deferred": 0, "waiting": 0})[kind] = max(0, count)
    return out
