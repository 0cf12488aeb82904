"""The Redis side of ``@rate_limit``: one GCRA script call per job (routing/gcra.lua)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import redis

from config import keys
from config.errors import ServiceUnavailable
from routing.redis_client import GCRA, redis_errors
from tasks.flow.rates import Rate


@dataclass(frozen=True)
class Decision:
    """A job may start now, or must wait ``wait`` seconds for the slot it holds."""

    allowed: bool
    wait: float
    #: This call reserved a new slot (the job was refused for the first time).
    reserved: bool


def take(client: redis.Redis, prefix: str, key: str, job: str, bucket: str,
         rate: Rate, mode: str = "deliver", near: float = 0.0, forgive: float = 0.0
         ) -> Decision:
    """Start ``job`` of ``key`` now, or reserve its slot (the next free one, behind
    every job of its key refused before it); ServiceUnavailable if Redis fails.
    A refusal with a wait over ``near`` seconds counts as a busy return (the caller
    waits for a nearer slot in place). A reserved job that starts at most ``forgive``
    seconds after its slot counts as started at it (its copy may come back that late).
    ``mode="submit"``: the job is being published; it takes its place in the key's plan
    (now: it starts on arrival if the real runs allow; later: a reserved slot)."""
    with redis_errors("rate limit of %s", key, error=ServiceUnavailable):
        allowed, wait_ms, reserved = GCRA(
            client, [keys.rate_limit(prefix, key), keys.rate_stats(prefix)],
            repr(rate.interval_ms), rate.burst, job, bucket, mode, repr(near * 1000.0),
            repr(forgive * 1000.0))
    return Decision(bool(allowed), int(wait_ms) / 1000.0, bool(reserved))


#: Most seconds of a reserved job's lateness the limit forgives (see forgiven_lateness).
MAX_FORGIVEN = 0.1


def forgiven_lateness(rate: Rate) -> float:
    """Seconds a reserved job may start after its slot and still count as started at it
    (its copy came back through the broker late by the wait step and a busy worker's
    queue): without this every such lateness would push the key's next jobs back. Never
    so much that a 1-second window sees more than rate + burst starts: k starts then
    span at least (k - burst) x interval - this, which must stay under
    (floor(r) + 1 - r) / r seconds for r starts a second."""
    r = rate.per_second
    return min(MAX_FORGIVEN, 0.9 * (math.floor(r) + 1 - r) / r, rate.interval_ms / 2000.0)


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
