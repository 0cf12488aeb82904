"""Rate-limited tasks for the @rate_limit tests and benchmark. Loaded by test workers
with ``--include tests.support.fault_tasks,tests.support.rate_tasks``.

Each run appends its start (key, message id, time, pid) to a Redis list;
RECURTEST_RECORD_URL sends the records to another Redis than the limit's.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import redis

from config.settings import settings
from tasks.app import app
from tasks.base import MessageTask
from tasks.distlock import user_lock
from tasks.flow import rate_limit
from tasks.flow.limiter import forgiven_lateness
from tasks.flow.rates import parse_rate
from tests.support.recorder import recorder

INCLUDE = "tests.support.fault_tasks,tests.support.rate_tasks"
#: The test limit: 5 starts a second per key, one at a time.
RATE, BURST = 5.0, 1


def runs_key() -> str:
    return f"{settings().key_prefix}:test:rated:runs"


def record(message: Any) -> None:
    recorder().rpush(runs_key(), json.dumps({"key": message["user_id"], "id": message["id"],
                                             "t": time.time(), "pid": os.getpid()}))


def read_starts(client: redis.Redis) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in client.lrange(runs_key(), 0, -1)]


@app.task(bind=True, base=MessageTask, name="tests.rated_work")
@rate_limit(key=lambda m: m["user_id"], rate="5/s", burst=BURST)
def rated_work(self: MessageTask, message: Any) -> None:
    """Record the start, then work ``payload["ms"]`` milliseconds."""
    record(message)
    time.sleep(float((message.get("payload") or {}).get("ms", 0)) / 1000)


@app.task(bind=True, base=MessageTask, name="tests.rated_locked_work")
@user_lock()
@rate_limit(key=lambda m: m["user_id"], rate="5/s", burst=BURST)
def rated_locked_work(self: MessageTask, message: Any) -> None:
    """The same under the user's lock (lock outside, limit inside)."""
    record(message)
    time.sleep(float((message.get("payload") or {}).get("ms", 0)) / 1000)


def least_span(n: int, rate: float = RATE, burst: int = BURST) -> float:
    """Seconds ``n`` starts of one key take at least: their charges are spaced by the
    rate (after the burst), and a start may come up to the lateness the rate forgives
    after its charge (a copy back a moment late), less 50 ms of the recorder's timing."""
    return (n - burst) / rate - forgiven_lateness(parse_rate(f"{rate:g}/s", burst)) - 0.05


def window_violations(starts: list[dict[str, Any]], rate: float = RATE,
                      burst: int = BURST) -> dict[str, int]:
    """Per key, the most starts in any 1-second window beyond rate + burst (0: none)."""
    by_key: dict[str, list[float]] = {}
    for s in starts:
        by_key.setdefault(s["key"], []).append(s["t"])
    over: dict[str, int] = {}
    for key, times in by_key.items():
        times.sort()
        j, most = 0, 0
        for i, t in enumerate(times):
            while times[j] <= t - 1.0:
                j += 1
            most = max(most, i - j + 1)
        if most > rate + burst:
            over[key] = most - int(rate + burst)
    return over


@app.task(bind=True, base=MessageTask, name="tests.unrated_work")
def unrated_work(self: MessageTask, message: Any) -> None:
    """The same job with no limit: what the workers can run (the benchmark's capacity)."""
    record(message)
    time.sleep(float((message.get("payload") or {}).get("ms", 0)) / 1000)


@app.task(bind=True, base=MessageTask, name="tests.floor_work")
def floor_work(self: MessageTask, message: Any) -> None:
    """The same job plus one Redis script call that decides nothing (``return 1``, on
    the limiter's own connection): the floor of any check that asks Redis once a job."""
    from routing.redis_client import get_redis
    from tasks.flow.limiter import own_connections, pack

    with own_connections(get_redis()).held() as conn:
        conn.send_packed_command([pack("EVAL", "return 1", 0)], check_health=False)
        conn.read_response()
    record(message)
    time.sleep(float((message.get("payload") or {}).get("ms", 0)) / 1000)


@app.task(bind=True, base=MessageTask, name="tests.celery_rated_work",
          rate_limit=os.environ.get("RECURTEST_CELERY_RATE", "5/s"))
def celery_rated_work(self: MessageTask, message: Any) -> None:
    """The baseline: Celery's own ``rate_limit``, one token bucket per task name in each
    worker instance (node): not per key, not across workers."""
    record(message)
    time.sleep(float((message.get("payload") or {}).get("ms", 0)) / 1000)
