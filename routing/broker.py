"""The broker boundary: connecting, reading a queue's depth, and the one translator
of the broker drivers' errors (kombu, py-amqp, sockets) into :class:`BrokerUnavailable`.

Every module that talks to the broker goes through here for these, so a broker that
is down, refuses or breaks a connection is always one ``BrokerUnavailable`` saying
where it happened, and callers catch recur's error, never the driver's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import amqp.exceptions
import kombu.exceptions
from amqp.exceptions import NotFound
from kombu import Connection

from config.errors import BrokerBlocked, BrokerUnavailable, ServiceRefused, register_driver
from routing.blocked import blocked_now, watch_blocked

register_driver(kombu.exceptions.OperationalError, "broker")
register_driver(amqp.exceptions.AMQPError, "broker")

#: What the drivers raise for a broker that is down, refuses, or broke the connection:
#: sockets (``OSError``, ``socket.timeout``), py-amqp's connection and channel errors,
#: and kombu's wrapper of them.
BROKER_ERRORS: tuple[type[BaseException], ...] = (
    OSError, amqp.exceptions.AMQPError, kombu.exceptions.OperationalError)
#: What a publish through Celery (``apply_async``, a chord) raises for a broker it cannot
#: use: the above and kombu's other errors (a connection pool that ran out, LimitExceeded).
PUBLISH_ERRORS: tuple[type[BaseException], ...] = (*BROKER_ERRORS, kombu.exceptions.KombuError)


def unavailable(where: str, exc: BaseException, *, named: bool = False) -> BrokerUnavailable:
    """The error for ``exc``: ``"<where>: <exc>"`` (``named``: with its class name)."""
    said = f"{type(exc).__name__}: {exc}" if named else str(exc)
    return BrokerUnavailable(f"{where}: {said}")


class broker_errors:
    """``with broker_errors(where):`` a driver's error in the block is raised as
    :class:`BrokerUnavailable` (never swallowed: code after the block is reached only
    when the block ended normally). With ``blocked`` (the py-amqp connection the block
    publishes on) a blocked broker is said once and a failure is :class:`BrokerBlocked`;
    a block that ends normally (confirmed) shows the broker takes publishes again."""

    def __init__(self, where: str, *, named: bool = False, blocked: Any = None) -> None:
        self.where, self.named = where, named
        self.blocked = None if blocked is None else watch_blocked(blocked)

    def __enter__(self) -> None:
        return None

    def __exit__(self, _type: type[BaseException] | None, exc: BaseException | None,
                 _tb: TracebackType | None) -> None:
        if self.blocked is not None and exc is None:
            self.blocked.on_unblocked()  # a connection dropped while blocked never hears it
        if isinstance(exc, BROKER_ERRORS) or type(exc) is BrokerUnavailable:  # a confirm timeout
            if self.blocked is not None and self.blocked.since is not None:
                raise BrokerBlocked(f"{self.where}: {self.blocked.describe()}; not confirmed, "
                                    "tried again later") from exc
            raise unavailable(self.where, exc, named=self.named) from exc


def connect(conn: Connection, *, retry: bool = False) -> None:
    """Connect ``conn`` (``retry``: kombu's ``ensure_connection``, one retry); any
    failure is one :class:`BrokerUnavailable` at once, not kombu's retries and traceback."""
    try:
        if retry:
            conn.ensure_connection(max_retries=1, interval_start=0, timeout=5)
        else:
            conn.connect()
    except Exception as exc:  # kombu raises whatever its transport raised
        raise unavailable(f"broker {conn.as_uri()}: cannot connect", exc, named=True) from exc


#: Reply codes by which the broker refuses this client rather than failing: ACCESS_REFUSED
#: (a wrong user or password, or no permission on a resource) and NOT_ALLOWED (a virtual
#: host that does not exist or that the user may not use).
ACCESS_CODES = frozenset({403, 530})


def access_refusal(exc: BaseException | None) -> amqp.exceptions.AMQPError | None:
    """The broker's refusal of this client in ``exc`` or its causes (kombu wraps py-amqp's
    errors), else None: a refusal is a configuration error, not an outage to wait out."""
    return reply_in(exc, ACCESS_CODES)


def reply_in(exc: BaseException | None, codes: frozenset[int]) -> amqp.exceptions.AMQPError | None:
    """The broker's error in ``exc`` or its causes whose reply code is one of ``codes``."""
    while exc is not None:
        if isinstance(exc, amqp.exceptions.AMQPError) and exc.reply_code in codes:
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


#: Reply codes by which the broker refuses a declare of recur's topology, not this client:
#: PRECONDITION_FAILED (a queue or exchange of that name exists with another type, other
#: arguments or other durable/auto-delete flags) and RESOURCE_LOCKED (an exclusive queue
#: of another connection holds the name). Declaring again cannot help.
TOPOLOGY_CODES = frozenset({405, 406})


def topology_conflict(exc: BaseException | None) -> amqp.exceptions.AMQPError | None:
    """The broker's refusal of a declare or bind (of an exchange or a queue) in ``exc`` or
    its causes, else None (a 406 of another method, e.g. an unknown delivery tag, is not)."""
    while exc is not None:
        found = reply_in(exc, TOPOLOGY_CODES)
        if found is None:
            return None
        if (found.method_sig or (0, 0))[0] in (40, 50):  # Exchange.*, Queue.*
            return found
        exc = found.__cause__ or found.__context__
    return None


def topology_refused(url: str, conflict: amqp.exceptions.AMQPError) -> ServiceRefused:
    """The error for the broker's refusal of recur's topology (``topology_conflict``)."""
    return ServiceRefused(
        f"broker {Connection(url).as_uri()} refused recur's topology: ({conflict.reply_code}) "
        f"{conflict.reply_text}: {limit_hint(conflict) or CONFLICT_HINT}")


CONFLICT_HINT = ("a queue or exchange keeps the type, arguments and flags it was first declared "
                 "with (someone else declared it): move its messages away, delete it and run "
                 "`recur topology`")
ACCESS_HINT = ("check the user, password and virtual host of RECUR_BROKER_URL and the user's "
               "permissions there (configure, write and read on recur's queues and exchanges)")


def limit_hint(exc: amqp.exceptions.AMQPError) -> str | None:
    """What to do about a refusal by one of the virtual host's limits (``max-queues``,
    ``max-connections``: ``rabbitmqctl set_vhost_limits``), else None."""
    text = str(exc.reply_text)
    if "limit" not in text or "is reached" not in text:
        return None
    return ("the virtual host's limit is reached (rabbitmqctl list_vhost_limits): raise it, "
            "or free queues or connections there; recur declares two queues a bucket")


def check_access(url: str, prepare: Callable[[Connection], object]) -> bool:
    """Connect to ``url`` once and run ``prepare`` on it (a process's start: the topology).

    True when done; False when the broker cannot be reached (an outage the process rides
    out with its own retries). A broker that refuses the user, password, virtual host or a
    permission raises :class:`ServiceRefused` naming the URL (password masked), and so does
    one that refuses a declare (a queue or exchange someone else declared otherwise, naming
    it and what differs): retrying would loop on it forever.
    """
    conn = Connection(url, connect_timeout=5)
    try:
        conn.connect()
        prepare(conn)
    except BROKER_ERRORS as exc:
        conflict = topology_conflict(exc)
        if conflict is not None:
            raise topology_refused(url, conflict) from exc
        refusal = access_refusal(exc)
        if refusal is None:
            return False
        raise ServiceRefused(
            f"broker {conn.as_uri()} refused recur: ({refusal.reply_code}) "
            f"{refusal.reply_text}: {limit_hint(refusal) or ACCESS_HINT}") from exc
    finally:
        release(conn)
    return True


#: Seconds a connection's close handshake may take (a broker blocking it, under a resource
#: alarm, never reads the close: the close waited for its answer forever).
RELEASE_TIMEOUT = 5.0


def release(conn: Connection) -> None:
    """Release ``conn``; one that already broke has nothing left to release, and one the
    broker does not answer is dropped after RELEASE_TIMEOUT (at once if it blocks us)."""
    raw = getattr(conn, "_connection", None)  # not .connection: that one connects
    sock = getattr(getattr(raw, "transport", None), "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.settimeout(0.1 if blocked_now(raw) else RELEASE_TIMEOUT)
    with contextlib.suppress(*BROKER_ERRORS):
        conn.release()


def close_channel(channel: Any) -> None:
    """Close ``channel``; a broken one is closed by the broker itself."""
    with contextlib.suppress(*BROKER_ERRORS):
        channel.close()


@contextlib.contextmanager
def operator_session(conn: Connection) -> Iterator[Connection]:
    """``conn`` connected for an operator command, released at the end; a queue that
    does not exist is named with the command that declares it."""
    try:
        connect(conn, retry=True)
        try:
            yield conn
        except NotFound as exc:
            raise BrokerUnavailable(f"broker {conn.as_uri()}: {exc.reply_text}: run "
                                    f"`recur topology` to declare the queues") from exc
        except (*conn.connection_errors, *conn.channel_errors) as exc:
            raise unavailable(f"broker {conn.as_uri()}", exc, named=True) from exc
    finally:
        conn.release()


@dataclass(frozen=True)
class QueueStats:
    """What the broker says of one queue: messages ready and consumers attached."""

    name: str
    messages: int
    consumers: int


def queue_stats(channel: Any, name: str) -> QueueStats:
    """The one read of a queue's depth: a passive declare (never creates the queue;
    a missing one raises the driver's ``NotFound`` and closes ``channel``)."""
    _, messages, consumers = channel.queue_declare(queue=name, passive=True)
    return QueueStats(name, int(messages), int(consumers))


def queue_depth(connection: Connection, name: str) -> int:
    """Messages ready in queue ``name``, read on a channel of its own."""
    with connection.channel() as channel:
        return queue_stats(channel, name).messages


def inspect_queues(broker_url: str, names: list[str]) -> dict[str, QueueStats | None]:
    """Depth and consumers of each queue (None: not declared), on one short connection.

    A passive declare of a missing queue closes its channel (404), so each queue
    gets its own channel; the connection survives. Never creates a queue.
    """
    found: dict[str, QueueStats | None] = {}
    conn = Connection(broker_url, connect_timeout=5)
    try:
        connect(conn)
        for name in names:
            channel = conn.channel()
            try:
                found[name] = queue_stats(channel, name)
            except NotFound:
                found[name] = None
                continue
            except (*conn.connection_errors, *conn.channel_errors) as exc:
                raise unavailable(f"broker {conn.as_uri()}: cannot read queue {name}",
                                  exc) from exc
            with contextlib.suppress(*conn.connection_errors, *conn.channel_errors):
                channel.close()
    finally:
        with contextlib.suppress(Exception):
            conn.release()
    return found
