"""recur's boundary with redis-py: the process's client, the one translator of
redis-py's errors into ours, and the one loader of our Lua scripts.

Every module that talks to Redis gets its client here, runs its scripts through
:class:`Script` and wraps its calls in :class:`redis_errors`, so callers catch
:class:`~config.errors.ServiceUnavailable` (or the subclass they name), never
redis-py's errors. Each script is a ``.lua`` file beside its one user (whose
header documents its keys); the scripts with two users live beside this module:
``extend_lease.lua`` (the user lock and the resequencer's sender) and ``gcra.lua``
(``@rate_limit`` and a resequencer destination's rate).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from functools import cache
from importlib import resources
from types import TracebackType
from typing import Any, TypeVar

from config.absent_imports import absent
from config.errors import RecurError, ServiceUnavailable, register_driver
from config.settings import settings

#: redis-py 8 imports OpenTelemetry's metrics API and SDK when they are installed (the
#: ``otel`` extra: ~60 modules, ~2 MB in every process) for metrics of its own, exported
#: only once ``redis.observability`` is set up, which recur never does. They stay out
#: while redis-py loads; recur's tracing (routing/tracing/) imports what it uses later.
UNUSED_BY_REDIS = ("opentelemetry.metrics", "opentelemetry.sdk.metrics")

with absent(UNUSED_BY_REDIS):
    import redis
    from redis.exceptions import NoScriptError

register_driver(redis.exceptions.RedisError, "Redis")

T = TypeVar("T")


#: Connections the process's client keeps at most. A command holds one for its round
#: trip only, so a few serve hundreds of threads (the io bucket's 200): redis-py's default
#: pool opens one per thread in a call at once, ~50-80 KB each, and refuses the 101st
#: ("Too many connections"); this one makes a thread wait for a free connection instead.
POOL_SIZE = 16
#: Seconds a command waits for a free connection before Redis counts as unavailable.
POOL_WAIT = 5


@cache
def get_redis() -> redis.Redis:
    """A shared client; redis-py's pool is safe across the fork of a prefork child."""
    pool = redis.BlockingConnectionPool.from_url(
        settings().redis_url, max_connections=POOL_SIZE, timeout=POOL_WAIT,
        decode_responses=True, socket_timeout=5, socket_connect_timeout=5,
        health_check_interval=30)
    return redis.Redis(connection_pool=pool)


class redis_errors:
    """Turn redis-py's errors raised inside into ``error("Redis: <what>: <exc>")``,
    ``from`` the driver's. ``what`` is %-formatted with ``args`` only on an error (the
    lock's calls are on every job's path)."""

    __slots__ = ("args", "error", "what")

    def __init__(self, what: str = "", *args: object,
                 error: type[RecurError] = ServiceUnavailable) -> None:
        self.what, self.args, self.error = what, args, error

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if isinstance(exc, redis.RedisError):
            what = self.what % self.args if self.args else self.what
            raise self.error(f"Redis: {what}: {exc}" if what else f"Redis: {exc}") from exc


def refused(call: Callable[[], T]) -> tuple[T | None, str]:
    """``call()``'s answer, or (None, why) when Redis refused the command (renamed,
    disabled, no ACL permission); other errors propagate."""
    try:
        return call(), ""
    except redis.ResponseError as exc:
        return None, str(exc).partition(", with args")[0].strip()


def ping(client: redis.Redis) -> tuple[str, redis.RedisError | None]:
    """How Redis answers a PING: ``("ok", None)``; ``("refused", exc)`` when it turned
    recur away (a password or an ACL); ``("unreachable", exc)`` otherwise."""
    try:
        client.ping()
    except (redis.AuthenticationError, redis.ResponseError) as exc:
        return "refused", exc
    except redis.RedisError as exc:
        return "unreachable", exc
    return "ok", None


class Script:
    """One Lua script, run by EVALSHA with its sha worked out once and loaded again on
    NOSCRIPT (Redis restarted). Leaner than redis-py's ``Script``, which rebuilds its
    arguments on every call: the lock's acquire and release are on every job's path."""

    __slots__ = ("sha", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.sha = hashlib.sha1(self.text.encode()).hexdigest()

    @classmethod
    def of_file(cls, package: str, name: str, entry: str | None = None) -> Script:
        """The script in file ``name`` of ``package``; with ``entry``, the file defines
        functions and the script runs ``entry()``."""
        lua = resources.files(package).joinpath(name).read_text()
        return cls(f"{lua}\nreturn {entry}()\n" if entry else lua)

    def __call__(self, client: redis.Redis, keys: Sequence[str | bytes], *args: Any) -> Any:
        command: Any = client.execute_command  # untyped in redis-py
        try:
            return command("EVALSHA", self.sha, len(keys), *keys, *args)
        except NoScriptError:
            self.sha = str(client.script_load(self.text))
            return command("EVALSHA", self.sha, len(keys), *keys, *args)

    def load(self, client: redis.Redis) -> None:
        """Load the script into Redis now (the first call does not pay for it)."""
        self.sha = str(client.script_load(self.text))


#: Extend a lease (KEYS[1] holds its holder's token) only for its holder: the user
#: lock's watchdog and the resequencer's sender heartbeat.
EXTEND_LEASE = Script.of_file("routing", "extend_lease.lua")

#: GCRA with reserve-on-refusal, one limited key per call: ``@rate_limit`` and a bucket
#: file's rate (tasks/flow/limiter.py), a destination's rate (routing/reseq/pace.py).
GCRA = Script.of_file("routing", "gcra.lua")
