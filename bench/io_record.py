"""How the I/O benchmark's tasks count runs and sample lag, the same for every contender.

Each run increments ``<prefix>:runs`` and, one run in ``SAMPLE``, pushes
"<time> <lag>" (lag: run start − due time) on ``<prefix>:lags``.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from typing import Any

import redis
import redis.asyncio

PREFIX_VAR = "BENCHIO_PREFIX"
REDIS_URL = "redis://127.0.0.1:6379/0"
SAMPLE = 10
#: Seconds between two runs of one message (its countdown / defer).
EVERY = 10.0


def keys() -> tuple[str, str]:
    prefix = os.environ[PREFIX_VAR]
    return f"{prefix}:runs", f"{prefix}:lags"


_sync: redis.Redis | None = None
_async: dict[int, Any] = {}


def record_sync(due: float, started: float) -> None:
    global _sync
    if _sync is None:
        _sync = redis.Redis.from_url(REDIS_URL)
    runs, lags = keys()
    pipe = _sync.pipeline(transaction=False)
    pipe.incr(runs)
    if random.randrange(SAMPLE) == 0:
        pipe.rpush(lags, f"{started} {started - due}")
    pipe.execute()


async def record_async(due: float, started: float, client: Any = None) -> None:
    if client is None:
        loop = id(asyncio.get_running_loop())
        if loop not in _async:
            pool = redis.asyncio.BlockingConnectionPool.from_url(REDIS_URL, max_connections=32)
            _async[loop] = redis.asyncio.Redis(connection_pool=pool)
        client = _async[loop]
    runs, lags = keys()
    pipe = client.pipeline(transaction=False)
    pipe.incr(runs)
    if random.randrange(SAMPLE) == 0:
        pipe.rpush(lags, f"{started} {started - due}")
    await pipe.execute()


def read(client: redis.Redis) -> tuple[int, list[tuple[float, float]]]:
    """(runs so far, [(time, lag)] samples)."""
    runs, lags = keys()
    samples = [tuple(map(float, raw.split())) for raw in client.lrange(lags, 0, -1)]
    return int(client.get(runs) or 0), [(s[0], s[1]) for s in samples]


def now() -> float:
    return time.time()
