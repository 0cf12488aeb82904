"""The Redis side of ``@rate_limit``: one GCRA script call per job (routing/gcra.lua)."""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError

from config import keys
from config.errors import ServiceUnavailable
from routing.rate_counters import all_counts as all_counts  # re-exported: recur status
from routing.rate_counters import counters as counters  # reads them without tasks
from routing.redis_client import GCRA, POOL_WAIT, redis_errors
from tasks.flow.rates import Rate


class LimitRefused(ServiceUnavailable):
    """Redis answered but refused the limit's call (a key another program wrote): an
    operator must act; the job waits in the broker meanwhile."""


@dataclass(frozen=True)
class Decision:
    """A job may start now, or must wait ``wait`` seconds for the slot it holds."""

    allowed: bool
    wait: float
    #: This call reserved a new slot (the job was refused for the first time).
    reserved: bool


def take(client: redis.Redis, prefix: str, key: str, job: str, bucket: str,
         rate: Rate, mode: str = "deliver", near: float = 0.0, forgive: float = 0.0,
         line_grace: float | None = None) -> Decision:
    """Start ``job`` of ``key`` now, or reserve its slot (the next free one, behind
    every job of its key refused before it); ServiceUnavailable if Redis fails.
    A refusal with a wait over ``near`` seconds counts as a busy return (the caller
    waits for a nearer slot in place). A reserved job that starts at most ``forgive``
    seconds after its slot counts as started at it (its copy may come back that late).
    ``mode="submit"``: the job is being published; it takes its place in the key's plan
    (now: it starts on arrival if the real runs allow; later: a reserved slot). A placed
    job starts only once every job placed before it started (the key's line), or that
    job is ``line_grace`` seconds (default LINE_GRACE_MS) past its slot."""
    hashed = keys.rate_limit(prefix, key)
    with redis_errors("rate limit of %s", key, error=ServiceUnavailable):
        try:
            allowed, wait_ms, reserved = evalsha(
                client, hashed, keys.rate_stats(prefix), hashed + ":line",
                repr(rate.interval_ms), rate.burst, job, bucket, mode, repr(near * 1000.0),
                repr(forgive * 1000.0),
                LINE_GRACE_MS if line_grace is None else repr(line_grace * 1000.0))
        except redis.exceptions.OutOfMemoryError:
            raise  # Redis is full: an outage (redis_errors says so), not the limit's keys
        except redis.ResponseError as exc:  # Redis answered: say which key is not ours
            said = str(exc).split(" script: ")[0]
            raise LimitRefused(f"Redis: rate limit of {key}: {said}"
                               f"{wrong_state(client, hashed)}") from exc
    return Decision(bool(allowed), int(wait_ms) / 1000.0, bool(reserved))


#: The limited key's fields that hold times (ms): numbers a clock can reach.
TIMES = ("plan", "run", "late")


def wrong_state(client: redis.Redis, hashed: str) -> str:
    """'; key K is a T, where the limit keeps a U' (or a time field holding garbage) when
    another program wrote one of the limit's keys, else ''. Only on an error's path."""
    try:
        for key, kind in ((hashed, "hash"), (hashed + ":line", "zset")):
            found = str(client.type(key))
            if found not in ("none", kind):
                return f"; key {key} is a {found}, where the limit keeps a {kind}"
        for name, value in zip(TIMES, client.hmget(hashed, TIMES), strict=True):
            if value is not None and not _time(value):
                return (f"; key {hashed} field {name} holds {value!r:.40}, not a time (ms): "
                        f"another program wrote it (delete the key to reset the limit)")
    except redis.RedisError:
        pass  # best effort: the call's own error is reported
    return ""


def _time(value: Any) -> bool:
    try:
        return 0 <= float(value) < 2**53
    except ValueError:
        return False


def evalsha(client: redis.Redis, *keys_then_args: Any) -> Any:
    """gcra.lua on three keys, on one of this process's own connections to the client's
    Redis, the command packed here: about half the client CPU of redis-py's command path
    (pool, retry wrapper, generic packing), which is most of what a limit costs a no-op job.
    As redis-py would: a dead connection (Redis restarted) is reconnected once, NOSCRIPT
    loads the script and runs it again."""
    own = own_connections(client)
    with own.held() as conn:
        for attempt in range(3):
            try:
                conn.send_packed_command([pack("EVALSHA", GCRA.sha, 3, *keys_then_args)],
                                         check_health=False)
                return conn.read_response()
            except NoScriptError:
                if attempt == 2:
                    raise
                conn.send_command("SCRIPT", "LOAD", GCRA.text)
                GCRA.sha = str(conn.read_response())
            except (RedisConnectionError, RedisTimeoutError):
                conn.disconnect()
                if attempt:
                    raise
    raise AssertionError("unreachable")  # pragma: no cover


#: The limiter's connections a process holds at most (each call holds one for its round
#: trip): the io bucket's 200 threads share them instead of opening one each.
OWN_CONNECTIONS = 16


class OwnConnections:
    """A process's own connections to one client's Redis, each lent for one call.

    A connection per thread held 200 idle connections (~70 KB each with its read buffer)
    in an io worker; a call takes a free one, or opens one while fewer than
    OWN_CONNECTIONS exist, or waits for one. A call that ends in anything but an answer
    or a Redis error leaves its connection closed: a reply it did not read must not be
    read by the next call."""

    def __init__(self, client: redis.Redis, limit: int = OWN_CONNECTIONS) -> None:
        self._pool = client.connection_pool
        self._free: list[Any] = []
        self._limit = limit
        self._slots = threading.BoundedSemaphore(limit)

    def _make(self) -> Any:
        """A new connection, named in ``CLIENT LIST`` by the process it belongs to."""
        pool = self._pool
        return pool.connection_class(
            **{**pool.connection_kwargs, "client_name": f"recur-limit-{os.getpid()}"})

    @contextmanager
    def held(self) -> Iterator[Any]:
        """A connection of this process's own for one call."""
        if not self._slots.acquire(timeout=POOL_WAIT):
            raise RedisConnectionError(
                f"no free rate-limit connection in {POOL_WAIT} s ({self._limit} in use)")
        try:
            try:
                conn = self._free.pop()
            except IndexError:
                conn = self._make()
            try:
                yield conn
            except redis.RedisError:
                raise  # its reply was read (or it was disconnected): reusable
            except BaseException:
                conn.disconnect()
                raise
            finally:
                self._free.append(conn)
        finally:
            self._slots.release()


_OWN: dict[tuple[int, int], OwnConnections] = {}
_OWN_LOCK = threading.Lock()


def own_connections(client: redis.Redis) -> OwnConnections:
    """This process's (a forked child makes its own) connections for ``client``."""
    at = (os.getpid(), id(client))
    found = _OWN.get(at)
    if found is None:
        with _OWN_LOCK:
            found = _OWN.setdefault(at, OwnConnections(client))
    return found


def pack(*parts: Any) -> bytes:
    """A command in RESP: an array of bulk strings (what redis-py sends, built directly)."""
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        raw = part if isinstance(part, bytes) else str(part).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(raw), raw))
    return b"".join(out)


#: Milliseconds past its slot a key's first unstarted job may hold the jobs placed after
#: it (they wait their turn: one key's jobs start in the order they were placed). Longer
#: than a queue backlog lasts; a job later than that (its copy lost, or purged) leaves the
#: line, and starts when it comes, out of order.
LINE_GRACE_MS = "30000"

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

