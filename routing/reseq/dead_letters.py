"""A destination's dead letter: the messages it refused, kept durably and replayably.

When a destination answers a status about the message itself (400, 413, 422,
...: config/destination_policy.py), when the message's processing step failed
for good, or when the sender no longer knows the destination, the sender sets
that message aside here and the destination goes on in order. Each
destination has its own durable queue on the broker, ``outbound.dead.<d>``
(RECUR_QUEUE_TYPE, declared when its first letter comes), holding one
persistent JSON record per message: its sequence number, id, the reason and
status, and the message and step as submitted, so it can be submitted again.

**Nothing is lost between "set aside" and "done".** The sender waits for the
broker to confirm the record before it records the sequence number as done
(``advance.lua``). A crash after the confirm and before that record leaves the
message where it was: the next sender sends it again, it is refused again and
set aside again, so the queue holds the record twice; ``list`` shows it once
(``copies=2``) and ``replay`` submits it once. A crash before the confirm
leaves nothing to clean up.

``recur dead list --destination D`` shows the records, oldest sequence number
first, leaving them in the queue; ``recur dead replay --destination D``
submits each through the normal intake (a new arrival: a new sequence number,
processed again by its step, sent after everything already accepted) and
acknowledges its record only after that submit was confirmed: a crash
between the two replays it twice, never loses it.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from typing import Any

from amqp.exceptions import AMQPError, MessageNacked, NotFound
from kombu import Connection, Exchange, Queue, pools
from kombu.exceptions import KombuError

from config.errors import BrokerUnavailable, InvalidMessage, ResequencerFull, UnknownDestination
from config.settings import Settings
from routing.deadletter import check_limit, peek
from routing.routed import routed

#: Queue-name prefix of the destinations' dead letters.
QUEUE_PREFIX = "outbound.dead."
#: AMQP names are at most 255 bytes; a longer destination name is hashed.
MAX_NAME_BYTES = 200
BROKER_ERRORS = (OSError, KombuError, AMQPError, MessageNacked)


@dataclass(frozen=True)
class DeadLetter:
    """One message a destination refused (or that could not be processed for it)."""

    destination: str
    seq: int
    id: str
    reason: str
    #: The destination's HTTP status (None: it never answered: a failed step, ...).
    status: int | None
    at: float
    #: The message as submitted and its per-call step: what a replay submits again.
    message: Any = None
    step: str | None = None
    #: The processed result that was refused (None for a failed step).
    result: Any = None
    #: How many records of this (seq, id) the queue holds (see the module doc).
    copies: int = field(default=1, compare=False)

    def body(self) -> bytes:
        doc = asdict(self)
        del doc["copies"]
        return json.dumps(doc, separators=(",", ":"), default=str).encode()

    @classmethod
    def from_body(cls, destination: str, raw: bytes | str) -> DeadLetter:
        """The record in a message body; an unreadable one says so (and cannot be replayed)."""
        try:
            doc = json.loads(raw)
            return cls(destination=str(doc["destination"]), seq=int(doc["seq"]),
                       id=str(doc["id"]), reason=str(doc["reason"]),
                       status=None if doc.get("status") is None else int(doc["status"]),
                       at=float(doc.get("at") or 0), message=doc.get("message"),
                       step=doc.get("step"), result=doc.get("result"))
        except (ValueError, TypeError, KeyError, OverflowError,  # "seq": 1e999
                RecursionError) as exc:  # a body nested a thousand deep
            return cls(destination, 0, "", f"unreadable dead letter ({exc}): {raw[:200]!r}",
                       None, 0.0)

    @property
    def key(self) -> tuple[int, str]:
        return self.seq, self.id


def letter(destination: str, seq: int, entry: dict[str, Any], reason: str,
           status: int | None) -> DeadLetter:
    """The record of a buffered entry (``{"id", "result" | "failed", "message", "step"}``)."""
    return DeadLetter(destination=destination, seq=seq, id=str(entry.get("id", "")),
                      reason=reason, status=status, at=time.time(),
                      message=entry.get("message"), step=entry.get("step"),
                      result=entry.get("result"))


def queue_name(destination: str) -> str:
    """``outbound.dead.<destination>`` (a hash of the name when it is too long)."""
    if len(destination.encode()) > MAX_NAME_BYTES:
        return QUEUE_PREFIX + hashlib.sha256(destination.encode()).hexdigest()[:32]
    return QUEUE_PREFIX + destination


def dead_queue(destination: str, cfg: Settings) -> Queue:
    """The destination's dead-letter queue, reached through the default exchange (its name
    is the routing key: no binding, so no destination name can act as a pattern)."""
    return Queue(queue_name(destination), Exchange(""), routing_key=queue_name(destination),
                 durable=True, queue_arguments={"x-queue-type": cfg.queue_type})


def publish(cfg: Settings, dead: DeadLetter) -> None:
    """Put ``dead`` in its destination's queue, persistent; returns once the broker has
    confirmed it (BrokerUnavailable if it could not be published or was refused)."""
    queue = dead_queue(dead.destination, cfg)
    conn = Connection(cfg.broker_url, connect_timeout=5,
                      transport_options={"confirm_publish": True})
    try:
        with pools.connections[conn].acquire(block=True, timeout=10) as pooled:
            producer = pooled.Producer()  # mandatory: a queue deleted since is declared again
            routed(producer, partial(
                producer.publish, dead.body(), exchange="", routing_key=queue.name,
                declare=[queue], mandatory=True,
                delivery_mode=2, content_type="application/json", content_encoding="utf-8",
                message_id=f"{dead.destination}:{dead.seq}", timeout=10, confirm_timeout=10,
                headers={"x-recur-destination": dead.destination, "x-recur-seq": dead.seq,
                         "x-recur-status": dead.status or 0,
                         "x-recur-reason": dead.reason[:500]},
                retry=True, retry_policy={"max_retries": 2, "interval_start": 0.5,
                                          "interval_step": 1}), extra=[queue])
    except BROKER_ERRORS as exc:
        raise BrokerUnavailable(f"broker: cannot set aside seq {dead.seq} of destination "
                                f"{dead.destination!r} in {queue.name}: "
                                f"{type(exc).__name__}: {exc}") from exc


def exists(conn: Connection, name: str) -> bool:
    """Whether queue ``name`` exists (a passive declare: never creates it)."""
    channel = conn.channel()
    try:
        channel.queue_declare(queue=name, passive=True)
    except NotFound:
        return False
    channel.close()
    return True


def list_letters(conn: Connection, destination: str, limit: int = 100) -> list[DeadLetter]:
    """Up to ``limit`` records of ``destination``, oldest sequence number first, one per
    (seq, id) with its ``copies``; all left in the queue."""
    check_limit(limit)
    name = queue_name(destination)
    if not exists(conn, name):
        return []
    found: dict[tuple[int, str], DeadLetter] = {}
    with conn.channel() as channel:
        for n, raw in enumerate(peek(channel, name, limit)):
            one = DeadLetter.from_body(destination, raw.body)
            key = one.key if one.seq else (0, f"#{n}")  # each unreadable letter shown
            seen = found.get(key)
            found[key] = replace(one, copies=seen.copies + 1) if seen else one
    return sorted(found.values(), key=lambda d: d.seq)


@dataclass
class Replayed:
    """What ``replay`` did: (old seq, new seq, id) submitted, repeats dropped, records
    left in the queue with why, and why it stopped early (None: it did not)."""

    submitted: list[tuple[int, int, str]] = field(default_factory=list)
    repeats: int = 0
    left: list[tuple[DeadLetter, str]] = field(default_factory=list)
    stopped: str | None = None


def replay(conn: Connection, destination: str, resubmit: Callable[[DeadLetter], int],
           limit: int = 100) -> Replayed:
    """Submit up to ``limit`` records of ``destination`` again, oldest first, through
    ``resubmit`` (the intake: returns the new sequence number); each record is
    acknowledged only after its submit. UnknownDestination stops it (nothing more is
    submitted); a full destination stops it too, leaving the rest."""
    check_limit(limit)
    done = Replayed()
    name = queue_name(destination)
    if not exists(conn, name):
        return done
    with conn.channel() as channel:
        got = [(raw.delivery_tag, DeadLetter.from_body(destination, raw.body))
               for raw in peek(channel, name, limit)]
        submitted: set[tuple[int, str]] = set()
        for tag, one in sorted(got, key=lambda pair: pair[1].seq):
            if one.key in submitted:
                channel.basic_ack(tag)  # a second record of one just submitted
                done.repeats += 1
                continue
            why = _replay_one(one, resubmit, done)
            if why == "full":
                break
            if why:
                done.left.append((one, why))
                continue
            channel.basic_ack(tag)
            submitted.add(one.key)
        # Closing the channel returns every record not acknowledged.
    return done


def _replay_one(one: DeadLetter, resubmit: Callable[[DeadLetter], int],
                done: Replayed) -> str | None:
    """Submit one record: None when it was, else why not ('full': stop here)."""
    if one.message is None:
        return "its message was not kept (a record from before replays, or unreadable)"
    try:
        new_seq = resubmit(one)
    except UnknownDestination:
        raise
    except ResequencerFull as exc:
        done.stopped = str(exc)
        return "full"
    except InvalidMessage as exc:
        return str(exc)
    done.submitted.append((one.seq, new_seq, one.id))
    return None
