"""arq baseline of the I/O benchmark: ``arq bench.io_arq.WorkerSettings``.

The same request per job on arq's asyncio worker; the next run is arq's own
deferred job (``_defer_by``, a Redis sorted set).
"""

from __future__ import annotations

import os
from typing import Any

from arq.connections import RedisSettings

from bench.io_client import async_client
from bench.io_record import EVERY, now, record_async

QUEUE_VAR = "BENCHIO_ARQ_QUEUE"
CONCURRENCY_VAR = "BENCHIO_CONCURRENCY"


async def run(ctx: dict[str, Any], key: str, due: float) -> None:
    started = now()
    await async_client().get()
    await record_async(due, started, ctx["redis"])
    await ctx["redis"].enqueue_job("run", key, now() + EVERY, _defer_by=EVERY,
                                   _queue_name=os.environ[QUEUE_VAR])


class WorkerSettings:
    functions = [run]
    #: redis-py's asyncio pool holds 100 connections by default: fewer than max_jobs.
    redis_settings = RedisSettings(host="127.0.0.1", port=6379, max_connections=1000)
    queue_name = os.environ.get(QUEUE_VAR, "arq:queue")
    max_jobs = int(os.environ.get(CONCURRENCY_VAR, "200"))
    keep_result = 0
    handle_signals = True
