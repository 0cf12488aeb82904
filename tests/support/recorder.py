"""Where test tasks write what they did: the Redis their records go to.

RECURTEST_RECORD_URL sends the records to another Redis than the one the tasks use
(a test that stops the lock's or the limiter's Redis still reads every record).
"""

from __future__ import annotations

import os
from functools import cache

import redis

from config.settings import settings


@cache
def recorder() -> redis.Redis:
    """The process's client for the records (RECURTEST_RECORD_URL, else RECUR_REDIS_URL)."""
    url = os.environ.get("RECURTEST_RECORD_URL") or settings().redis_url
    return redis.Redis.from_url(url, decode_responses=True)
