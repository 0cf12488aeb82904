"""How the I/O benchmark's tasks count runs and sample lag, the same for every contender.

Runs add to ``<prefix>:runs`` and, one run in ``SAMPLE``, push "<time> <lag>" (lag:
run start − due time) on ``<prefix>:lags``. Each process (each event loop) tallies
its runs and writes them in one pipeline every ``FLUSH_RUNS`` runs or
``FLUSH_SECONDS``: a Redis round trip per run cost the worker about a tenth of its
CPU per run, which measured the recorder more than the contenders. The reader
misses at most the last flush interval at either end of its window.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from typing import Any

import redis
import redis.asyncio

PREFIX_VAR = "BENCHIO_PREFIX"
REDIS_URL = "redis://127.0.0.1:6379/0"
SAMPLE = 10
#: Seconds between two runs of one message (its countdown / defer); bench_io's ``--every``
#: sets it for the workers (the no-op cycle: 2).
EVERY_VAR = "BENCHIO_EVERY"
EVERY = float(os.environ.get(EVERY_VAR) or 10.0)
FLUSH_RUNS = 100
FLUSH_SECONDS = 0.25


def keys() -> tuple[str, str]:
    prefix = os.environ[PREFIX_VAR]
    return f"{prefix}:runs", f"{prefix}:lags"


class Tally:
    """Runs and lag samples not yet written."""

    def __init__(self) -> None:
        self.runs = 0
        self.lags: list[str] = []
        self.flushed = time.monotonic()

    def add(self, due: float, started: float) -> bool:
        """Count one run; whether it is time to write the tally."""
        self.runs += 1
        if random.randrange(SAMPLE) == 0:
            self.lags.append(f"{started} {started - due}")
        return self.runs >= FLUSH_RUNS or time.monotonic() - self.flushed >= FLUSH_SECONDS

    def take(self) -> tuple[int, list[str]]:
        runs, lags = self.runs, self.lags
        self.runs, self.lags, self.flushed = 0, [], time.monotonic()
        return runs, lags


def _queue(pipe: Any, runs: int, lags: list[str]) -> Any:
    runs_key, lags_key = keys()
    pipe.incrby(runs_key, runs)
    if lags:
        pipe.rpush(lags_key, *lags)
    return pipe


_sync: redis.Redis | None = None
_sync_tally = Tally()
_sync_lock = threading.Lock()


def record_sync(due: float, started: float) -> None:
    global _sync
    with _sync_lock:
        if not _sync_tally.add(due, started):
            return
        runs, lags = _sync_tally.take()
        if _sync is None:
            _sync = redis.Redis.from_url(REDIS_URL)
    _queue(_sync.pipeline(transaction=False), runs, lags).execute()


_async: dict[int, tuple[Any, Tally]] = {}


async def record_async(due: float, started: float, client: Any = None) -> None:
    loop = id(asyncio.get_running_loop())
    if loop not in _async:
        if client is None:
            pool = redis.asyncio.BlockingConnectionPool.from_url(REDIS_URL, max_connections=4)
            client = redis.asyncio.Redis(connection_pool=pool)
        _async[loop] = (client, Tally())
    client, tally = _async[loop]
    if tally.add(due, started):
        runs, lags = tally.take()
        await _queue(client.pipeline(transaction=False), runs, lags).execute()


def read(client: redis.Redis) -> tuple[int, list[tuple[float, float]]]:
    """(runs so far, [(time, lag)] samples)."""
    runs, lags = keys()
    samples = [tuple(map(float, raw.split())) for raw in client.lrange(lags, 0, -1)]
    return int(client.get(runs) or 0), [(s[0], s[1]) for s in samples]


def now() -> float:
    return time.time()
