"""The resequencer's state in Redis, behind one narrow class.

Per destination: the arrival sequence numbers handed out, the ones still
pending, a buffer of processed results keyed by sequence number, and the last
sequence number sent. Every change that must be atomic is a Lua script in
``routing/reseq/lua/`` (the lease's extend: ``routing/extend_lease.lua``), whose
header documents the keys it touches, run through the one script loader of
:mod:`routing.redis_client`; the key names are in :mod:`config.keys`. The state
lives in Redis, not in a worker, so a crashed worker loses none of it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from functools import cache
from typing import Any

import redis

from config import keys
from config.errors import ResequencerFull
from config.settings import Settings
from routing import redis_client
from routing.redis_client import EXTEND_LEASE, Script
from routing.reseq.lease import lease_ms
from routing.reseq.status_reading import RATE_WAITS as RATE_WAITS  # pace.py's import
from routing.reseq.status_reading import Reading
from routing.reseq.status_reading import Status as Status  # and tasks/metrics' import
from routing.reseq.stored import stored_seq

#: Skip records kept per destination (newest first); the counter counts them all.
SKIPPED_KEPT = 1000


def redis_errors(what: str) -> redis_client.redis_errors:
    """Redis's errors as ServiceUnavailable, saying what the resequencer could not do."""
    return redis_client.redis_errors("resequencer cannot %s", what)


@cache
def scripts() -> dict[str, Script]:
    """The resequencer's scripts by name: ``routing/reseq/lua/<name>.lua``, and the
    shared lease-extend script as ``extend``."""
    own = ("intake", "deposit", "acquire", "advance", "release", "wake", "outage")
    return {**{name: Script.of_file("routing.reseq.lua", f"{name}.lua") for name in own},
            "extend": EXTEND_LEASE}


@dataclass(frozen=True)
class Next:
    """What the sender sees for a destination's next sequence number."""

    seq: int
    #: {"t": arrival ms, "id": message id}, or None: nothing assigned past ``sent``.
    pending: dict[str, Any] | None
    #: The processed entry ({"id", "result"} or {"id", "failed"}), or None: not yet.
    entry: dict[str, Any] | None
    #: Redis's clock, the one arrival times are stamped with.
    now_ms: int
    #: Processed entries buffered (waiting behind this one if it is missing).
    buffered: int
    #: Whether the destination has an outage on record (see ``mark_outage``).
    outage: bool = False


class Resequencer:
    """All resequencer state operations for one Redis client and settings."""

    def __init__(self, client: redis.Redis, cfg: Settings) -> None:
        self.client = client
        self.cfg = cfg
        self.scripts = scripts()

    def preload(self) -> None:
        """Load every script into Redis now, so the first message does not pay for it."""
        with redis_errors("load its Lua scripts"):
            for script in self.scripts.values():
                script.load(self.client)

    def key(self, destination: str, part: str) -> str:
        return keys.reseq(self.cfg.key_prefix, destination, part)

    def keys_of(self, destination: str, *parts: str) -> list[str]:
        return [self.key(destination, part) for part in parts]

    def run(self, script: str, key_list: list[str], args: list[Any]) -> Any:
        """Run one of our Lua scripts; Redis errors become ServiceUnavailable."""
        with redis_errors(f"run {script}.lua"):
            return self.scripts[script](self.client, key_list, *args)

    def assign(self, destination: str, message_ids: list[str]) -> int:
        """Give the messages consecutive arrival sequence numbers; return the first.

        Raises ResequencerFull when the destination would hold more unsent messages
        than RECUR_RESEQ_CAPACITY.
        """
        first, held = self.run("intake", self.keys_of(destination, "seq", "pending"),
                               [self.cfg.reseq_capacity, *message_ids])
        if first == 0:
            raise ResequencerFull(
                f"destination {destination!r} holds {held} unsent message(s); "
                f"{len(message_ids)} more would exceed its capacity of "
                f"{self.cfg.reseq_capacity} (RECUR_RESEQ_CAPACITY): retry later")
        with redis_errors("record the destination"):
            self.client.sadd(keys.reseq_destinations(self.cfg.key_prefix), destination)
        return int(first)

    def deposit(self, destination: str, seq: int, entry: dict[str, Any],
                count_late: bool = True) -> str:
        """Buffer a processed entry: 'kick' (start a sender), 'queued' or 'late'."""
        return str(self.run(
            "deposit",
            self.keys_of(destination, "sent", "pending", "buffer", "sender", "wake", "stats"),
            [seq, json.dumps(entry), int(count_late)]))

    def acquire(self, destination: str, token: str) -> int:
        """Become the destination's one sender, for one lease (RECUR_SENDER_LEASE):
        the lease's fence (>= 1), or 0 if another sender holds it."""
        return int(self.run("acquire", self.keys_of(destination, "sender", "fence"),
                            [token, lease_ms(self.cfg)]))

    def holder(self, destination: str) -> str | None:
        """The token of the sender holding the destination's lease, if any."""
        with redis_errors("read the sender lease"):
            token = self.client.get(self.key(destination, "sender"))
        return None if token is None else str(token)

    def lock_left_ms(self, destination: str) -> int:
        """Milliseconds until the current sender lock expires (<= 0: free)."""
        with redis_errors("read the sender lock"):
            return int(self.client.pttl(self.key(destination, "sender")))

    def extend(self, destination: str, token: str, ttl_ms: int | None = None) -> bool:
        """Keep the sender lease for ``ttl_ms`` (default one lease); False if lost."""
        return bool(self.run("extend", self.keys_of(destination, "sender"),
                             [token, ttl_ms or lease_ms(self.cfg)]))

    def peek(self, destination: str) -> Next:
        """The next sequence number to send, its arrival and its entry (if processed).

        Only the sender moves ``sent`` and removes entries, so reading without a
        script is safe for the lock holder.
        """
        with redis_errors("read its state"):
            sent = stored_seq(self.client, self.key(destination, "sent"))
            pipe = self.client.pipeline(transaction=False)
            pipe.hget(self.key(destination, "pending"), str(sent + 1))
            pipe.hget(self.key(destination, "buffer"), str(sent + 1))
            pipe.time()
            pipe.hlen(self.key(destination, "buffer"))
            pipe.exists(self.key(destination, keys.OUTAGE))
            pending, entry, (secs, micros), buffered, outage = pipe.execute()
        return Next(seq=sent + 1, pending=json.loads(pending) if pending else None,
                    entry=json.loads(entry) if entry else None,
                    now_ms=int(secs) * 1000 + int(micros) // 1000, buffered=int(buffered),
                    outage=bool(outage))

    def gap_since(self, destination: str, seq: int, now_ms: int) -> int:
        """When the sender first saw ``seq`` missing with later ones ready (ms); the
        first call for a seq records ``now_ms``. Only the lock holder calls it."""
        key = self.key(destination, "gap")
        with redis_errors("record a gap"):
            seen_seq, _, since = str(self.client.get(key) or "").partition(":")
            if seen_seq == str(seq):
                return int(since)
            self.client.set(key, f"{seq}:{now_ms}")
        return now_ms

    def advance(self, destination: str, token: str, seq: int,
                skipped: dict[str, Any] | None = None, only_if_absent: bool = False) -> str:
        """Record ``seq`` as sent (or skipped, with its record): 'ok', 'not-owner',
        'out-of-step' or 'arrived' (a timing-out gap filled just now)."""
        return str(self.run(
            "advance",
            self.keys_of(destination, "sender", "sent", "pending", "buffer", "skipped", "stats"),
            [token, seq, "skipped" if skipped is not None else "sent",
             json.dumps(skipped or {}), SKIPPED_KEPT, int(only_if_absent)]))

    def set_aside(self, destination: str, token: str, seq: int, status: int | None) -> str:
        """Record ``seq`` as set aside (its dead letter is already published), counted
        with the destination's ``status`` (None: it never answered): as ``advance``."""
        return str(self.run(
            "advance",
            self.keys_of(destination, "sender", "sent", "pending", "buffer", "skipped", "stats"),
            [token, seq, "dead", "{}", SKIPPED_KEPT, 0, "" if status is None else status]))

    def mark_outage(self, destination: str, status: int, reason: str, seq: int, kind: str,
                    tries: int, ttl_ms: int) -> str:
        """Record a try the destination held back: 'new' (an outage starts: say so once),
        'changed' (another status or kind) or 'same'; see outage.lua."""
        return str(self.run("outage", self.keys_of(destination, keys.OUTAGE, "stats"),
                            ["down", status, reason[:500], seq, kind, tries, ttl_ms]))

    def end_outage(self, destination: str) -> tuple[float, int, int] | None:
        """End the destination's outage: (since, tries, last status) of the one that ended,
        or None when there was none (another sender ended it already)."""
        ended = self.run("outage", self.keys_of(destination, keys.OUTAGE, "stats"), ["up"])
        if not ended:
            return None
        since, tries, status = (int(part or 0) for part in ended)
        return since / 1000, tries, status

    def release(self, destination: str, token: str, force: bool = False) -> str:
        """Let go unless work came in that needs a sender (see release.lua):
        'released', 'more' or 'not-owner'."""
        return str(self.run("release",
                            self.keys_of(destination, "sender", "sent", "buffer", "wake"),
                            [token, lease_ms(self.cfg), int(force)]))

    def book_wake(self, destination: str, delay: float) -> float | None:
        """Book a sender run in ``delay`` s; None if an earlier booked run covers it."""
        ms = int(self.run("wake", self.keys_of(destination, "wake"), [max(1, int(delay * 1000))]))
        return None if ms < 0 else ms / 1000

    def destinations(self) -> list[str]:
        """Every destination the resequencer has seen, sorted."""
        with redis_errors("list destinations"):
            members = self.client.smembers(keys.reseq_destinations(self.cfg.key_prefix))
        return sorted(str(m) for m in members)

    def status(self, destination: str) -> Status:
        """Counters and positions of one destination; what another program wrote there is
        named in ``unreadable`` and read as nothing (routing/reseq/status_reading.py)."""
        return Reading(self.client, self.cfg.key_prefix).status(destination)

    def skipped(self, destination: str, limit: int = 100) -> list[dict[str, Any]]:
        """The newest skip records of a destination, newest first."""
        with redis_errors("read skip records"):
            raw = self.client.lrange(self.key(destination, "skipped"), 0, limit - 1)
        return [json.loads(item) for item in raw]


def skip_record(seq: int, message_id: str, reason: str) -> dict[str, Any]:
    """What is kept about a skipped sequence number."""
    return {"seq": seq, "id": message_id, "reason": reason, "at": time.time()}
