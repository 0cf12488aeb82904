"""A destination's status (:class:`Status`) read from Redis with every value checked
(``recur resequencer status``, ``recur status``, the exporter through
``Resequencer.status``).

Redis state another program wrote -- a position or counter that is no whole number (text,
a float, past Redis's 64 bits, bytes that are not UTF-8), a key of another Redis type, an
outage record recur did not write, a destinations member that names no destination, a skip
record that is no JSON object -- is named in one line per key and read as nothing; the
rest of the status is read and shown. Values are read undecoded (``NEVER_DECODE``), so
bytes that are not UTF-8 are one more such value, not a UnicodeDecodeError.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import redis
from redis.client import NEVER_DECODE

from config import keys
from config.destinations import DESTINATION_NAME, NAME_RULE
from config.text import brief, visible
from routing import redis_client

#: The stats field of sends that waited for their slot (gcra.lua's, label 'rate').
RATE_WAITS = "deferred:rate"

#: Redis's integers (INCR, HINCRBY) are 64-bit: a value past them is none of theirs.
LIMIT = 2**63
#: Epoch ms from which an outage's time is no time (the year 5138).
LAST_MS = 10**14
#: Characters of a skip record's id or reason, and of an outage's reason, shown.
SHOWN = 200
#: The stats hash's counters a status shows (and ``refused:<status>``).
COUNTERS = ("sent", "skipped", "late", "dead", RATE_WAITS)


@dataclass(frozen=True)
class Outage:
    """A destination's current outage: since when, and what its last try got."""

    since: float  # epoch seconds
    last: float
    #: The last answer's status (0: no answer at all: timeout, connection refused).
    status: int
    reason: str
    tries: int
    #: The sequence number waiting (nothing after it goes out meanwhile).
    seq: int
    #: 'refused' (not ready: 401, 404, 3xx, ...) or 'unavailable' (5xx, timeout, ...).
    kind: str


@dataclass(frozen=True)
class Status:
    """A destination at a glance (``recur resequencer status``)."""

    destination: str
    next_seq: int
    assigned: int
    buffered: int
    in_flight: int
    sent: int
    skipped: int
    late: int
    sender_active: bool
    #: Messages set aside in the destination's dead letter (routing/reseq/dead_letters.py).
    dead_lettered: int = 0
    #: Tries the destination held back or refused, by status ("401": 12).
    refused: dict[str, int] = field(default_factory=dict)
    outage: Outage | None = None
    #: Sends that waited for their slot under the destination's rate (routing/reseq/pace.py).
    rate_waits: int = 0
    #: A line per key another program wrote that could not be read (read as nothing).
    unreadable: tuple[str, ...] = ()


def redis_errors(what: str) -> redis_client.redis_errors:
    """Redis's errors as ServiceUnavailable, saying what could not be read."""
    return redis_client.redis_errors("resequencer cannot %s", what)


def text(raw: Any) -> str | None:
    """A Redis string as text (None: absent, or bytes that are not UTF-8)."""
    if not isinstance(raw, bytes):
        return None
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return None


def count(raw: Any) -> int | None:
    """A Redis string as a count, 0 .. 2^63 - 1 (None: anything else)."""
    try:
        number = int(raw) if isinstance(raw, bytes) else -1
    except ValueError:  # also a number of more than 4,300 digits
        return None
    return number if 0 <= number < LIMIT else None


def shown(raw: bytes) -> str:
    """A value another program wrote, for the line naming its key."""
    return brief(raw[:100], 40)


def pairs(raw: Any) -> Iterable[tuple[Any, Any]]:
    """An HGETALL answer (a dict in RESP3, a flat list in RESP2) as pairs."""
    return raw.items() if isinstance(raw, dict) else zip(raw[::2], raw[1::2], strict=True)


class Reading:
    """The reads of one command: ``unreadable`` gets a line per key it could not read."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.client, self.prefix = client, prefix
        self.unreadable: list[str] = []

    def raw(self, *command: Any) -> Any:
        """One command's answer, undecoded (its strings: bytes)."""
        run: Any = self.client.execute_command  # untyped in redis-py
        return run(*command, **{NEVER_DECODE: True})

    def wrong_type(self, key: str, keeps: str) -> None:
        try:
            kind = f"a {self.raw('TYPE', key).decode()}"
        except redis.RedisError:
            kind = "of another type"
        self.unreadable.append(f"key {key} is {kind}, where the resequencer keeps a {keeps}")

    def number(self, key: str, raw: Any) -> int:
        """A sequence number kept as a string (0: none, or unreadable)."""
        if isinstance(raw, redis.ResponseError):
            self.wrong_type(key, "string")
            return 0
        found = 0 if raw is None else count(raw)
        if found is None:
            self.unreadable.append(f"key {key} holds {shown(raw)}, no sequence number")
        return found or 0

    def size(self, key: str, raw: Any) -> int:
        """A hash's length (0: the key is of another type)."""
        if isinstance(raw, redis.ResponseError):
            self.wrong_type(key, "hash")
            return 0
        return int(raw)

    def counters(self, key: str, raw: Any) -> dict[str, int]:
        """The stats hash's counters (an unreadable one: left out, named once)."""
        if isinstance(raw, redis.ResponseError):
            self.wrong_type(key, "hash")
            return {}
        found: dict[str, int] = {}
        bad: list[tuple[str, bytes]] = []
        for name, value in pairs(raw):
            field = text(name)
            if field is None or not (field in COUNTERS or field.startswith("refused:")):
                continue
            number = count(value)
            if number is None:
                bad.append((field, value))
            else:
                found[field] = number
        if bad:
            more = f" ({len(bad) - 1} more field(s) alike)" if len(bad) > 1 else ""
            self.unreadable.append(
                f"key {key} field {visible(bad[0][0], 60)} holds "
                f"{shown(bad[0][1])}, not a count{more}"
            )
        return found

    def outage(self, key: str, raw: Any) -> Outage | None:
        """The destination's outage record (None: none, or unreadable)."""
        if isinstance(raw, redis.ResponseError):
            self.wrong_type(key, "hash")
            return None
        if not raw:
            return None
        fields = {text(name): value for name, value in pairs(raw)}
        numbers = [count(fields.get(name)) for name in ("since", "last", "status", "tries", "seq")]
        reason, kind = text(fields.get("reason")), text(fields.get("kind"))
        since, last, status, tries, seq = (n or 0 for n in numbers)
        if None in numbers or reason is None or kind is None or max(since, last) >= LAST_MS:
            self.unreadable.append(
                f"key {key} holds no outage record recur wrote (a field "
                f"missing, not a number or not UTF-8)"
            )
            return None
        return Outage(
            since / 1000, last / 1000, status, visible(reason, SHOWN), tries, seq, visible(kind, 20)
        )

    def status(self, destination: str) -> Status:
        """Counters and positions of one destination, each value checked."""
        sent_key, seq_key, buffer_key, stats_key, sender_key, outage_key = (
            keys.reseq(self.prefix, destination, part)
            for part in ("sent", "seq", "buffer", "stats", "sender", keys.OUTAGE)
        )
        before = len(self.unreadable)
        with redis_errors("read a destination's status"):
            # MULTI by hand: one snapshot, and EXEC's answer read undecoded.
            pipe = self.client.pipeline(transaction=False)
            queue: Any = pipe.execute_command  # untyped in redis-py
            queue("MULTI")
            for command, key in (
                ("GET", sent_key),
                ("GET", seq_key),
                ("HLEN", buffer_key),
                ("HGETALL", stats_key),
                ("EXISTS", sender_key),
                ("HGETALL", outage_key),
            ):
                queue(command, key)
            queue("EXEC", **{NEVER_DECODE: True})
            sent, assigned, buffered, stats, sender, outage = pipe.execute()[-1]
        sent, assigned = self.number(sent_key, sent), self.number(seq_key, assigned)
        buffered = self.size(buffer_key, buffered)
        counters = self.counters(stats_key, stats)
        refused = {
            name.partition(":")[2]: n for name, n in counters.items() if name.startswith("refused:")
        }
        down = self.outage(outage_key, outage)
        return Status(
            destination=destination,
            next_seq=sent + 1,
            assigned=assigned,
            buffered=buffered,
            in_flight=assigned - sent - buffered,
            sent=counters.get("sent", 0),
            skipped=counters.get("skipped", 0),
            late=counters.get("late", 0),
            sender_active=bool(sender),
            dead_lettered=counters.get("dead", 0),
            refused=refused,
            outage=down,
            rate_waits=counters.get(RATE_WAITS, 0),
            unreadable=tuple(self.unreadable[before:]),
        )

    def destinations(self) -> list[str]:
        """Every destination the resequencer has seen, sorted (a member that names none
        is left out and named)."""
        key = keys.reseq_destinations(self.prefix)
        with redis_errors("list destinations"):
            try:
                members = self.raw("SMEMBERS", key)
            except redis.ResponseError:
                self.wrong_type(key, "set")
                return []
        names = [text(member) or "" for member in members]
        bad = [
            m
            for m, name in zip(members, names, strict=True)
            if not DESTINATION_NAME.fullmatch(name)
        ]
        if bad:
            self.unreadable.append(
                f"key {key} holds {len(bad)} member(s) that name no "
                f"destination ({NAME_RULE}), e.g. {shown(bad[0])}"
            )
        return sorted(name for name in names if DESTINATION_NAME.fullmatch(name))

    def skipped(self, destination: str, limit: int) -> list[str]:
        """The lines of a destination's newest skip records, newest first (a record that
        is no JSON object recur wrote is left out and named)."""
        key = keys.reseq(self.prefix, destination, "skipped")
        with redis_errors("read skip records"):
            try:
                raw = self.raw("LRANGE", key, 0, limit - 1)
            except redis.ResponseError:
                self.wrong_type(key, "list")
                return []
        lines, bad = [], []
        for item in raw:
            try:
                record = json.loads(item)
            except (ValueError, RecursionError):  # RecursionError: [[[[…]]]]
                record = None
            if not isinstance(record, dict) or not {"seq", "id", "reason"} <= record.keys():
                bad.append(item)
                continue
            lines.append(
                f"  skipped seq={visible(str(record['seq']), 40)} "
                f"id={visible(str(record['id']), SHOWN)} "
                f"{visible(str(record['reason']), SHOWN)}"
            )
        if bad:
            self.unreadable.append(
                f"key {key} holds {len(bad)} entry(ies) that are no skip "
                f"record, e.g. {shown(bad[0])}"
            )
        return lines
