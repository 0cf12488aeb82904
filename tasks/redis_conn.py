"""The process's Redis client, built once from the settings."""

from __future__ import annotations

from functools import cache

import redis

from config.settings import settings


@cache
def get_redis() -> redis.Redis:
    """A shared client; redis-py's pool is safe across the fork of a prefork child."""
    return redis.Redis.from_url(settings().redis_url, decode_responses=True,
                                socket_timeout=5, socket_connect_timeout=5,
                                health_check_interval=30)
