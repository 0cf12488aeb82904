"""The per-user lock's Redis side: every read and write goes through one of the
Lua scripts in ``tasks/lua`` (their header comments document the key layout),
so taking, extending, releasing and handing over are each atomic and compare
the holder's token. Driver errors come out as :class:`LockUnavailable`.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Literal, NamedTuple

import redis
from redis.exceptions import NoScriptError

from config import keys
from config.errors import LockUnavailable

Outcome = Literal["done", "failed", "retry", "again"]
ACQUIRED, PARKED, DUPLICATE = 1, 0, 2


def _lua(name: str) -> str:
    return resources.files("tasks").joinpath("lua", name).read_text()


def new_token() -> str:
    """A random token: only the holder that drew it can extend or release."""
    return secrets.token_hex(16)


class Attempt(NamedTuple):
    """What acquire did: ``status`` is ACQUIRED, PARKED or DUPLICATE (a tuple: one
    is built per delivery, and a frozen dataclass costs several times more)."""

    status: int
    seq: int
    epoch: str
    fence: int


@dataclass(frozen=True)
class Handover:
    """A parked job whose turn came, with the lock reserved for ``token``: run it
    holding the lock (``token``, ``fence``) or publish it with the token."""

    job: str
    seq: int
    epoch: str
    token: str
    fence: int


class Script:
    """A lock script run by EVALSHA with its sha worked out once, and loaded again
    when Redis answers NOSCRIPT (restarted, or its script cache flushed).

    Leaner than redis-py's ``Script``, which builds a new argument tuple and
    imports a module on every call: acquire and release sit on every job's path.
    """

    __slots__ = ("sha", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.sha = hashlib.sha1(text.encode()).hexdigest()

    def __call__(self, client: redis.Redis, keys: tuple[bytes, ...], *args: Any) -> Any:
        command: Any = client.execute_command  # untyped in redis-py
        try:
            return command("EVALSHA", self.sha, len(keys), *keys, *args)
        except NoScriptError:
            self.sha = str(client.script_load(self.text))
            return command("EVALSHA", self.sha, len(keys), *keys, *args)


@lru_cache(maxsize=16)
def _scripts() -> dict[str, Script]:
    """The scripts, read once per process (lock_lib.lua goes in front of the three
    that share it)."""
    lib = _lua("lock_lib.lua")
    return {"acquire": Script(lib + _lua("lock_acquire.lua")),
            "release": Script(lib + _lua("lock_release.lua")),
            "wake": Script(lib + _lua("lock_wake.lua")),
            "extend": Script(_lua("lock_extend.lua")),
            "submit": Script(_lua("lock_submit.lua"))}


class LockStore:
    """Typed calls of the lock scripts for one Redis and key prefix."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.client = client
        self.prefix = prefix
        scripts = _scripts()
        self._acquire, self._release, self._wake = (scripts[name] for name in
                                                    ("acquire", "release", "wake"))
        self._extend, self._submit = scripts["extend"], scripts["submit"]

    def user_keys(self, user: str) -> tuple[str, ...]:
        """KEYS of the lock scripts for ``user``, in the order lock_lib.lua documents."""
        return _script_keys(self.prefix, user)

    def _run(self, script: Script, user: str, args: tuple[Any, ...], what: str) -> Any:
        try:
            return script(self.client, _encoded_keys(self.prefix, user), *args)
        except redis.RedisError as exc:
            raise LockUnavailable(f"Redis: cannot {what} the lock of user {user!r}: "
                                  f"{exc}") from exc

    def submit(self, user: str) -> tuple[int, str]:
        """Number a newly published job of ``user``: (sequence number, epoch)."""
        seq, epoch = self._run(self._submit, user, (), "number a job for")
        return int(seq), str(epoch)

    def acquire(self, user: str, token: str, ttl: float, seq: int, epoch: str, job: str,
                handover: str, gap_timeout: float) -> Attempt:
        """Take ``user``'s lock for ``job`` or park the job until its turn."""
        answer = self._run(self._acquire, user, (user, token, _ms(ttl), seq, epoch, job,
                                                 handover, _ms(gap_timeout)), "take")
        status, seq_, fence, epoch_ = str(answer).split(" ", 3)
        return Attempt(int(status), int(seq_), epoch_, int(fence))

    def extend(self, user: str, token: str, ttl: float) -> bool:
        """Renew the lease; False when ``token`` no longer holds the lock."""
        try:
            extended = self._extend(self.client, _encoded_keys(self.prefix, user)[:1],
                                    token, _ms(ttl))
        except redis.RedisError as exc:
            raise LockUnavailable(f"Redis: cannot extend the lock of user {user!r}: "
                                  f"{exc}") from exc
        return bool(extended)

    def release(self, user: str, token: str, seq: int, outcome: Outcome, ttl: float,
                gap_timeout: float) -> tuple[bool, Handover | None]:
        """Release ``user``'s lock if ``token`` holds it; (released?, job to publish)."""
        handover = new_token()
        answer = self._run(self._release, user, (user, token, seq, outcome, handover,
                                                 _ms(ttl), _ms(gap_timeout)), "release")
        if answer == -1:
            return False, None
        return True, _handover(answer, handover)

    def wake(self, user: str, ttl: float, gap_timeout: float) -> Handover | None:
        """Hand ``user``'s free lock to its first parked job, if its turn came."""
        handover = new_token()
        answer = self._run(self._wake, user, (user, handover, _ms(ttl), _ms(gap_timeout)),
                           "look at")
        return _handover(answer, handover)

    def due_users(self, limit: int = 100) -> list[str]:
        """Users whose wake time has come (by Redis's clock)."""
        try:
            seconds, micros = self.client.time()
            now_ms = seconds * 1000 + micros // 1000
            users = self.client.zrangebyscore(keys.lock_wake(self.prefix), "-inf", now_ms,
                                              start=0, num=limit)
        except redis.RedisError as exc:
            raise LockUnavailable(f"Redis: cannot read the lock wake list: {exc}") from exc
        return [str(u) for u in users]

    def holder(self, user: str) -> str | None:
        """Token holding ``user``'s lock (None when free): for operators and tests."""
        owner = self.client.get(keys.user_lock(self.prefix, user, "owner"))
        return None if owner is None else str(owner)

    def count(self, event: str) -> None:
        """Add one to a lock event counter (for events outside the scripts)."""
        try:
            self.client.hincrby(keys.lock_stats(self.prefix), event, 1)
        except redis.RedisError as exc:
            raise LockUnavailable(f"Redis: cannot count a lock event: {exc}") from exc

    def stats(self) -> dict[str, int]:
        """Lock event counters summed over every worker (busy, handovers, ...)."""
        raw: Any = self.client.hgetall(keys.lock_stats(self.prefix))
        return {str(k): int(v) for k, v in raw.items()}


@lru_cache(maxsize=4096)
def _script_keys(prefix: str, user: str) -> tuple[str, ...]:
    """Cached: a job's acquire and release (and a hot user's whole line) share them."""
    return (*(keys.user_lock(prefix, user, part) for part in keys.LOCK_PARTS),
            keys.lock_wake(prefix), keys.lock_counter(prefix), keys.lock_stats(prefix))


@lru_cache(maxsize=4096)
def _encoded_keys(prefix: str, user: str) -> tuple[bytes, ...]:
    """The same keys as bytes, which redis-py sends without encoding them again."""
    return tuple(key.encode() for key in _script_keys(prefix, user))


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def _handover(answer: Any, token: str) -> Handover | None:
    """The handover in a script's answer: 0 (none) or {1, job, seq, epoch, fence}."""
    if not isinstance(answer, list):
        return None
    return Handover(job=str(answer[1]), seq=int(answer[2]), epoch=str(answer[3]), token=token,
                    fence=int(answer[4]))
