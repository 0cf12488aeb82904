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
import logging
import time
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
log = logging.getLogger("recur.redis")

#: Seconds between two "Redis is out of memory" lines of one process: every job that
#: meets a full Redis would say it again, and it lasts until someone frees memory.
OOM_SAY_EVERY = 60.0
#: What a write refused for want of memory is reported as (the event ``redis_oom``).
OOM = ("out of memory: used memory is over maxmemory and maxmemory-policy noeviction "
       "refuses writes (event redis_oom); free memory or raise maxmemory (CONFIG SET "
       "maxmemory): the work waits and resumes by itself")
_oom_said = [-OOM_SAY_EVERY]


def out_of_memory(exc: BaseException | None) -> bool:
    """Whether ``exc`` (redis-py's, or ours from it) is Redis refusing a write for want
    of memory: an outage to wait out, not a refusal of the call's own keys."""
    while exc is not None:
        if isinstance(exc, redis.exceptions.OutOfMemoryError):
            return True
        exc = exc.__cause__
    return False


def say_out_of_memory(what: str) -> None:
    """Log once per OOM_SAY_EVERY seconds (per process) that Redis is out of memory."""
    now = time.monotonic()
    if now - _oom_said[0] >= OOM_SAY_EVERY:
        _oom_said[0] = now
        log.warning("event=redis_oom Redis is %s (first seen: %s; said again in %gs at "
                    "most while it lasts)", OOM, what, OOM_SAY_EVERY)


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
    lock's calls are on every job's path). A write refused for want of memory says so
    (:data:`OOM`), and the process logs it once a minute (:func:`say_out_of_memory`)."""

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
            if isinstance(exc, redis.exceptions.OutOfMemoryError):
                say_out_of_memory(what or "a write")
                raise self.error(f"Redis: {what}: {OOM}" if what else f"Redis: {OOM}") from exc
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
