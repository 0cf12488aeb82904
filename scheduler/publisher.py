"""Publish claimed rows as ordinary Celery task messages, with batched confirms.

kombu's ``confirm_publish`` waits for each message's confirm on its own (about
2,000 messages/s here). This publisher puts a whole batch on a channel in
confirm mode and then waits once for the broker to confirm all of it, so a
round trip is paid per batch, not per message. Messages are persistent and
``mandatory``: a message no queue takes comes back and fails the batch
instead of vanishing. A row whose message cannot be built or is refused by
the broker on its own is returned as refused (scheduler/refusals.py), for the
store to set aside, without failing the batch or the connection. It is recur's
one confirm-batching publisher: the seed's broker sink (spark/publish.py) sends
its plain messages through it too; broker errors are translated by
routing/broker.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import amqp
from kombu import Connection

from config.buckets_in_use import bucket_table
from config.errors import BrokerUnavailable, PublishRefused
from config.settings import settings
from routing import tracing
from routing.broker import BROKER_ERRORS, broker_errors, queue_stats, release, topology_conflict
from routing.queues import DEAD_EXCHANGE, declare_again
from scheduler.bounds import Limits
from scheduler.metrics import BROKER_CONNECTIONS
from scheduler.outgoing import Build, Framing, Outgoing, Route
from scheduler.refusals import BROKER_REFUSED, Published, Refusal
from scheduler.stop import Stop
from scheduler.store import Claimed
from scheduler.task_message import TaskMessage, dead_message, task_message

#: Channel-close codes that refuse one message, not the service: PRECONDITION_FAILED
#: (e.g. larger than the broker's max_message_size) and CONTENT_TOO_LARGE.
REFUSAL_CODES = frozenset({406, 311})


class ConfirmingPublisher:
    """One broker connection: a confirm-mode channel to publish, one to read depths.

    A row whose message cannot be built or sent is refused, not published: the
    checks that need no broker answer are made per row before sending
    (scheduler/outgoing.py); a message the broker refuses by closing the
    publish channel over it (406, e.g. larger than its ``max_message_size``) is
    isolated: the batch's unconfirmed rows are sent again in halves, with new
    lease stamps, until the one refused alone is found; the connection stays.
    Anything else (a connection lost, a nack, a message returned unroutable, no
    confirm in time) is an outage: :class:`BrokerUnavailable`, nothing refused.
    """

    def __init__(self, broker_url: str, exchange: str, confirm_timeout: float = 30.0,
                 on_connect: Callable[[Connection], object] | None = None,
                 limits: Limits | None = None) -> None:
        self.broker_url = broker_url
        self.on_connect = on_connect
        self.exchange = exchange
        self.confirm_timeout = confirm_timeout
        self.limits = limits if limits is not None else Limits.of(settings())
        self._kombu: Connection | None = None
        self._raw: Any = None
        self._pub: Any = None
        self._info: Any = None
        self._tag = 0
        self._pending: set[int] = set()
        self._sent: dict[int, Outgoing] = {}
        self._failures: list[str] = []
        self._returned: set[str] = set()
        self._restamps = 0
        self.stop = Stop()  # the scheduler's own when it runs one (scheduler/stop.py)

    def connect(self) -> None:
        """(Re)connect: open the confirm channel and the depth channel."""
        self.close()
        with broker_errors(f"broker {self._safe_url()}: cannot connect"):
            self._kombu = Connection(self.broker_url, connect_timeout=5)
            self._kombu.connect()
            self._raw = self._kombu.connection
            self.stop.watch(self._raw)  # a stop that gives up cuts it (scheduler/stop.py)
            self._pub = self._raw.channel()
            self._pub.confirm_select()
            self._pub.events["basic_ack"].add(self._on_ack)
            self._pub.events["basic_nack"].add(self._on_nack)
            self._pub.events["basic_return"].add(self._on_return)
            self._info = self._raw.channel()
            try:
                if self.on_connect is not None:
                    self.on_connect(self._kombu)  # the topology, on channels of its own
            except BROKER_ERRORS as exc:  # a queue someone else declared otherwise: its
                if topology_conflict(exc) is None:  # bucket is held back by its refusals,
                    raise  # the others go on (a reconnect loop stalled every bucket)
                logging.getLogger("recur.scheduler").warning(
                    "broker refused recur's topology: %s", topology_conflict(exc))
        BROKER_CONNECTIONS.inc()
        self._tag = 0
        self._pending.clear()

    def close(self) -> None:
        if self._kombu is not None:
            release(self._kombu)  # one that already broke has nothing left to release
        self._kombu = self._raw = self._pub = self._info = None

    def _safe_url(self) -> str:
        return str(Connection(self.broker_url).as_uri())

    def depth(self, queue: str) -> int:
        """Messages ready in ``queue``."""
        if self._info is None:
            self.connect()
        with broker_errors(f"broker: cannot read the depth of {queue}"):
            return queue_stats(self._info, queue).messages

    def publish(self, rows: list[Claimed]) -> Published | None:
        """Publish ``rows`` to their bucket queues; return once the broker confirmed all
        (None), or with the rows refused and the lease stamps that changed."""
        table = bucket_table().by_name
        with tracing.span("recur.publish", rows=len(rows), exchange=self.exchange):
            return self._publish_rows(rows, lambda row: (self.exchange, table[row.bucket].queue)
                                      if row.bucket in table else None, task_message)

    def publish_dead(self, rows: list[Claimed], reason: str | None = None) -> Published | None:
        """Put poison jobs on their buckets' dead-letter queues; return once confirmed
        (None), or with the rows refused (they are set aside instead)."""
        table = bucket_table().by_name
        return self._publish_rows(
            rows, lambda row: (DEAD_EXCHANGE.name, table[row.bucket].dead_queue)
            if row.bucket in table else None, lambda row: dead_message(row, reason))

    def channel(self) -> Any:
        """A new plain channel on this connection (the dead-letter sweep reads with it)."""
        if self._raw is None:
            self.connect()
        with broker_errors("broker: cannot open a channel"):
            return self._raw.channel()

    def _framing(self) -> Framing:
        if self._pub is None:
            self.connect()
        return Framing(self._pub.channel_id, self._raw.frame_max, self.limits)

    def _publish_rows(self, rows: list[Claimed], route: Callable[[Claimed], Route],
                      build: Build) -> Published | None:
        framing, out, items = self._framing(), Published(), []
        for row in rows:
            item = framing.prepare(row, route(row), build)
            if isinstance(item, Refusal):
                out.refused[row.job_key] = item
            else:
                items.append(item)
        self._publish_items(items, out)
        return out or None

    def publish_messages(self, messages: list[tuple[str, str, TaskMessage]]) -> None:
        """Publish bare ``(exchange, routing key, message)`` triples (no rows behind them:
        any refusal fails the batch); return once the broker confirmed all."""
        framing, items = self._framing(), []
        for exchange, routing_key, msg in messages:
            item = framing.encode(exchange, routing_key, msg)
            if isinstance(item, Refusal):
                raise BrokerUnavailable(f"broker: cannot publish {msg.task_id}: {item.reason}")
            items.append(item)
        self._publish_items(items, Published())

    def _publish_items(self, items: list[Outgoing], out: Published) -> None:
        if not items:
            return
        with broker_errors(f"broker: publishing {len(items)} messages failed", blocked=self._raw):
            self._confirm(items, out)

    def _confirm(self, items: list[Outgoing], out: Published) -> None:
        """Send ``items`` and wait for their confirms; isolate a refused one."""
        self._failures.clear()
        self._returned.clear()  # routing keys returned unroutable: their queues declared again
        self._sent.clear()
        try:
            self._send(items)
            self._wait_for_confirms()
        except amqp.exceptions.ChannelError as exc:
            if exc.reply_code not in REFUSAL_CODES or any(i.row is None for i in items):
                raise
            self._confirmed(out)
            unconfirmed = [self._sent[tag] for tag in sorted(self._pending)]
            self._reopen()
            self._isolate(len(items), unconfirmed, exc, out)
            return
        if self._failures:
            done = declare_again(self._raw.channel, self._returned, settings())
            raise PublishRefused(f"broker refused {len(self._failures)} of {len(items)} "
                                 f"messages: {self._failures[0]}; none of the batch is marked "
                                 f"dispatched, its rows stay due{''.join(f'; {d}' for d in done)}")
        self._confirmed(out)

    def _confirmed(self, out: Published) -> None:
        """Note the lease stamps of the confirmed copies that were sent again."""
        for tag, item in self._sent.items():
            if tag not in self._pending and item.restamped and item.row is not None:
                out.leases[item.row.job_key] = item.row.lease_until

    def _isolate(self, sent: int, unconfirmed: list[Outgoing], exc: amqp.exceptions.AMQPError,
                 out: Published) -> None:
        """A message of the ``sent`` ones was refused: the one refused alone is set aside,
        otherwise the unconfirmed ones are sent again in halves."""
        if sent == 1:
            for item in unconfirmed:
                assert item.row is not None
                out.refused[item.row.job_key] = Refusal(
                    BROKER_REFUSED, f"the broker refused its message when it was sent alone: "
                                    f"{exc.reply_code} {exc.reply_text}")
                out.leases.pop(item.row.job_key, None)
            return
        half = max(1, len(unconfirmed) // 2)
        for group in (unconfirmed[:half], unconfirmed[half:]):
            if group:
                self._confirm(self._restamped(group, out), out)

    def _restamped(self, items: list[Outgoing], out: Published) -> list[Outgoing]:
        """``items`` with new lease stamps: a copy of the refused send that reached a queue
        unconfirmed is then stale (the row records the stamp that was confirmed)."""
        framing, again = self._framing(), []
        for item in items:
            assert item.row is not None and item.build is not None
            self._restamps += 1
            row = replace(item.row, lease_until=item.row.lease_until
                          + timedelta(microseconds=self._restamps))
            built = framing.prepare(row, (item.exchange, item.routing_key), item.build,
                                    restamped=True)
            if isinstance(built, Refusal):
                out.refused[row.job_key] = built
            else:
                again.append(built)
        return again

    def _reopen(self) -> None:
        """The broker closed the publish channel over a message (py-amqp reopened it):
        confirm mode again, delivery tags from 1."""
        self._pub.confirm_select()
        self._tag = 0
        self._pending.clear()
        self._sent.clear()

    def _send(self, items: list[Outgoing]) -> None:
        """Write the batch's frames in one go (a message too big for one frame goes
        through py-amqp, which splits it)."""
        out: list[bytes] = []
        for item in items:
            self._put(item, out)
            self._tag += 1
            self._pending.add(self._tag)
            self._sent[self._tag] = item
        self._write(out)

    def _put(self, item: Outgoing, out: list[bytes]) -> None:
        """Queue one message's frames in ``out`` (or send it through py-amqp at once,
        after what is queued)."""
        if item.frames is not None:
            out.append(item.frames)
            return
        self._write(out)
        self._pub.basic_publish(item.message.as_amqp(), exchange=item.exchange,
                                routing_key=item.routing_key, mandatory=True)

    def _write(self, chunks: list[bytes]) -> None:
        if chunks:
            self._raw.transport.write(b"".join(chunks))
            chunks.clear()

    def _wait_for_confirms(self) -> None:  # a stop cuts it short (scheduler/stop.py)
        self.stop.wait_for_confirms(lambda: len(self._pending), self._raw, self.confirm_timeout)

    def _on_ack(self, tag: int, multiple: bool) -> None:
        if multiple:
            self._pending = {t for t in self._pending if t > tag}
        else:
            self._pending.discard(tag)

    def _on_nack(self, tag: int, multiple: bool) -> None:
        tags = [t for t in self._pending if t <= tag] if multiple else [tag]
        queues = sorted({self._sent[t].routing_key for t in tags if t in self._sent})
        self._failures += [f"nacked by queue {', '.join(queues) or '?'} (full under a "
                           f"max-length policy with overflow reject-publish, or a broker "
                           f"alarm)"] * len(tags)
        self._on_ack(tag, multiple)

    def _on_return(self, exc: Any, exchange: str, routing_key: str, message: Any) -> None:
        self._returned.add(routing_key)
        self._failures.append(f"returned unroutable from {exchange!r} with key "
                              f"{routing_key!r} (no queue bound to it): {exc}")
