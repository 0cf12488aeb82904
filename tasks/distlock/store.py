"""The per-user lock's Redis side: typed calls of the entry points of
``lock.lua`` (beside this file; its header documents the keys and the rule that
orders a user's jobs), run through routing/redis_client.py's one script loader,
whose translator turns Redis's errors into :class:`LockUnavailable`.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal, NamedTuple

import redis

from config import keys
from config.errors import LockLineFull, LockUnavailable
from routing.redis_client import EXTEND_LEASE, Script, redis_errors
from tasks.distlock.broken import lease_restored, refusal

Outcome = Literal["done", "failed", "retry", "again"]
#: acquire's answers (lock.lua): parked, acquired, duplicate, passed over, too old,
#: never numbered (above the counter), not parked (the user's parked jobs at the cap).
PARKED, ACQUIRED, DUPLICATE, PASSED_OVER, TOO_OLD, NOT_NUMBERED, PARK_FULL = range(7)
#: The cap of a user's line and parked jobs when none is given (RECUR_LOCK_MAX_PARKED).
DEFAULT_CAP = 10_000
#: How much longer than the wait budget a user's memory outlives its last call: a
#: margin for clock skew between publishers and Redis.
KEEP_MARGIN = 300.0


def new_token() -> str:
    """A random token: only the holder that drew it can extend or release."""
    return secrets.token_hex(16)


class Attempt(NamedTuple):
    """What acquire did (a tuple: one is built per delivery)."""

    status: int
    seq: int
    fence: int


@dataclass(frozen=True)
class Handover:
    """A parked job whose turn came. ``token`` non-empty: the lock is taken for it
    (run it here, holding ``token`` and ``fence``); empty: publish it, and its copy
    takes the free lock when it arrives."""

    job: str
    seq: int
    token: str
    fence: int


@lru_cache(maxsize=1)
def _scripts() -> dict[str, Script]:
    """lock.lua once per entry point, and the shared lease-extend script."""
    entries = ("submit", "acquire", "release", "wake", "published")
    return {**{name: Script.of_file("tasks.distlock", "lock.lua", name) for name in entries},
            "extend": EXTEND_LEASE}


class LockStore:
    """The lock's calls for one Redis and key prefix; ``keep`` is how long (s) a user's
    memory outlives its last call: RECUR_LOCK_WAIT_BUDGET + KEEP_MARGIN."""

    def __init__(self, client: redis.Redis, prefix: str, keep: float = 3600 + KEEP_MARGIN,
                 cap: int = DEFAULT_CAP) -> None:
        self.client, self.prefix, self.keep_ms, self.cap = client, prefix, _ms(keep), cap
        self.scripts = _scripts()

    def user_keys(self, user: str) -> tuple[str, ...]:
        """The user's own keys, in lock.lua's KEYS order (without the global ones)."""
        return _script_keys(self.prefix, user)[:len(keys.LOCK_PARTS)]

    def _run(self, name: str, user: str, args: tuple[Any, ...], what: str) -> Any:
        encoded = _encoded_keys(self.prefix, user)
        with redis_errors("cannot %s the lock of user %r", what, user, error=LockUnavailable):
            try:
                return self.scripts[name](self.client, encoded, *args)
            except redis.exceptions.OutOfMemoryError:
                raise  # Redis is full: an outage (redis_errors says so), not these keys
            except redis.ResponseError as exc:  # Redis answered: this call's keys
                raise refusal(self.client, encoded, f"cannot {what} the lock of user "
                              f"{user!r}", exc) from exc

    def submit(self, user: str) -> int:
        """Number a newly published job of ``user`` (one global sequence); LockLineFull
        when ``cap`` of its jobs wait behind one not finished yet."""
        seq = int(self._run("submit", user, (self.keep_ms, self.cap), "number a job for"))
        if seq == 0:
            raise LockLineFull(f"user {user!r} already has {self.cap} jobs waiting for their "
                               f"turn behind the one running (RECUR_LOCK_MAX_PARKED="
                               f"{self.cap}); nothing was published: retry later")
        return seq

    def acquire(self, user: str, token: str, ttl: float, seq: int, task_id: str, job: str,
                gap_timeout: float, since: float = 0.0, budget: float = 3600.0) -> Attempt:
        """Take ``user``'s lock for ``job``, park it until its turn, or refuse it."""
        answer = self._run("acquire", user, (user, token, _ms(ttl), seq, task_id, job,
                                             _ms(gap_timeout), self.keep_ms,
                                             int(since * 1000), _ms(budget), self.cap), "take")
        status, seq_, fence, *foreign = str(answer).split(" ")
        if foreign:  # an owner key of another type, without an expiry: given one lease
            lease_restored(self.user_keys(user)[0], foreign[0], ttl)
        return Attempt(int(status), int(seq_), int(fence))

    def extend(self, user: str, token: str, ttl: float) -> bool:
        """Renew the lease; False when ``token`` no longer holds the lock."""
        return bool(self._run("extend", user, (token, _ms(ttl)), "extend"))

    def release(self, user: str, token: str, seq: int, outcome: Outcome, ttl: float,
                gap_timeout: float, task_id: str = "", take: bool = False
                ) -> tuple[bool, Handover | None]:
        """Release ``user``'s lock if ``token`` holds it: (released?, next job). With
        ``take`` the lock is taken at once for the next job, under a new token."""
        token_next = new_token() if take else ""
        answer = self._run("release", user, (user, token, seq, outcome, token_next, _ms(ttl),
                                             _ms(gap_timeout), self.keep_ms, task_id),
                           "release")
        if answer == -1:
            return False, None
        return True, _handover(answer, token_next)

    def wake(self, user: str, ttl: float, gap_timeout: float) -> Handover | None:
        """Hand ``user``'s free lock to its first parked job (to publish), if its turn came."""
        return _handover(self._run("wake", user, (user, _ms(ttl), _ms(gap_timeout)),
                                   "look at"), "")

    def published(self, user: str, seq: int, gap_timeout: float) -> bool:
        """Job ``seq`` was handed over through the broker and its publish confirmed:
        republish it only if its copy has not arrived after ``gap_timeout`` (until
        this call a reaper republishes it after one lease, so a publisher killed
        mid-publish costs a lease, not the gap timeout)."""
        return bool(self._run("published", user, (user, seq, _ms(gap_timeout)),
                              "record a handover for"))

    def look_again(self, user: str, seconds: float) -> None:
        """Have a reaper look at ``user`` again in ``seconds`` (a handover not published)."""
        with redis_errors("cannot write the lock wake list %s", keys.lock_wake(self.prefix),
                          error=LockUnavailable):
            seconds_now, micros = self.client.time()
            due = seconds_now * 1000 + micros // 1000 + _ms(seconds)
            self.client.zadd(keys.lock_wake(self.prefix), {user: due})

    def due_users(self, limit: int = 100) -> list[str]:
        """Users whose wake time has come (by Redis's clock)."""
        with redis_errors("cannot read the lock wake list %s", keys.lock_wake(self.prefix),
                          error=LockUnavailable):
            seconds, micros = self.client.time()
            now_ms = seconds * 1000 + micros // 1000
            users = self.client.zrangebyscore(keys.lock_wake(self.prefix), "-inf", now_ms,
                                              start=0, num=limit)
        return [str(u) for u in users]

    def holder(self, user: str) -> str | None:
        """Token holding ``user``'s lock (None when free): for operators and tests."""
        owner = self.client.get(keys.user_lock(self.prefix, user, "owner"))
        return None if owner is None else str(owner)

    def count(self, event: str) -> None:
        """Add one to a lock event counter (for events outside the scripts)."""
        with redis_errors("cannot count a lock event", error=LockUnavailable):
            self.client.hincrby(keys.lock_stats(self.prefix), event, 1)

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
    """The handover in a script's answer: 0 (none) or {1, job, seq, fence}."""
    if not isinstance(answer, list):
        return None
    return Handover(job=str(answer[1]), seq=int(answer[2]), token=token, fence=int(answer[3]))
