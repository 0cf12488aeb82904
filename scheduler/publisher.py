"""Publish claimed rows as ordinary Celery task messages, with batched confirms.

kombu's ``confirm_publish`` waits for each message's confirm on its own (about
2,000 messages/s here). This publisher puts a whole batch on a channel in
confirm mode and then waits once for the broker to confirm all of it, so a
round trip is paid per batch, not per message. Messages are persistent and
``mandatory``: a message no queue takes comes back and fails the batch
instead of vanishing.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import amqp
from kombu import Connection

from config.buckets import bucket_table
from config.errors import BrokerUnavailable
from routing.queues import DEAD_EXCHANGE
from scheduler import frames
from scheduler.callargs import decode_call
from scheduler.calls import DISPATCH_HEADER, dispatch_header
from scheduler.store import Claimed

#: Celery protocol 2 "embed" part: no callbacks, errbacks, chain or chord.
EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
BROKER_ERRORS = (OSError, amqp.exceptions.AMQPError, socket.timeout)


@dataclass(frozen=True)
class TaskMessage:
    """A Celery (protocol 2) task message for one claimed row."""

    task_id: str
    body: bytes
    headers: dict[str, Any]

    def as_amqp(self) -> amqp.Message:
        """The same message for py-amqp (used when it is too big for one frame)."""
        return amqp.Message(self.body, content_type="application/json",
                            content_encoding="utf-8", application_headers=self.headers,
                            delivery_mode=2, correlation_id=self.task_id)


def task_message(row: Claimed) -> TaskMessage:
    """The task message for ``row``, carrying its job key, token and lease stamp."""
    args, kwargs, retries = decode_call(row.args, row.job_key, row.bucket)
    task_id = str(uuid.uuid4())
    # Only the headers a Celery worker requires (it defaults the others): every
    # header costs encoding time on the hot path.
    headers: dict[str, Any] = {
        "task": row.task, "id": task_id,
        DISPATCH_HEADER: dispatch_header(row.job_key, row.token, row.lease_until, row.due_at),
    }
    if retries:
        headers["retries"] = retries
    body = json.dumps([args, kwargs, EMBED], separators=(",", ":")).encode()
    return TaskMessage(task_id, body, headers)


#: Headers of a job the scheduler dead-lettered: why, and which job it was.
REASON_HEADER = "x-recur-reason"
JOB_HEADER = "x-recur-job"


def dead_message(row: Claimed, reason: str | None = None) -> TaskMessage:
    """The dead-letter copy of a poison job: a plain task message (no dispatch
    header), so a replayed copy runs as an ordinary message and a recurring
    one re-creates its row when it reschedules itself. ``reason`` defaults to
    the lease path's (the row's attempts)."""
    args, kwargs, retries = decode_call(row.args, row.job_key, row.bucket)
    task_id = str(uuid.uuid4())
    headers: dict[str, Any] = {
        "task": row.task, "id": task_id, JOB_HEADER: row.job_key,
        REASON_HEADER: reason or f"lease expired {row.attempts} times",
    }
    if retries:
        headers["retries"] = retries
    body = json.dumps([args, kwargs, EMBED], separators=(",", ":")).encode()
    return TaskMessage(task_id, body, headers)


class ConfirmingPublisher:
    """One broker connection: a confirm-mode channel to publish, one to read depths."""

    def __init__(self, broker_url: str, exchange: str, confirm_timeout: float = 30.0,
                 on_connect: Callable[[Connection], object] | None = None) -> None:
        self.broker_url = broker_url
        self.on_connect = on_connect
        self.exchange = exchange
        self.confirm_timeout = confirm_timeout
        self._kombu: Connection | None = None
        self._raw: Any = None
        self._pub: Any = None
        self._info: Any = None
        self._tag = 0
        self._pending: set[int] = set()
        self._failures: list[str] = []

    def connect(self) -> None:
        """(Re)connect: open the confirm channel and the depth channel."""
        self.close()
        try:
            self._kombu = Connection(self.broker_url, connect_timeout=5)
            self._kombu.connect()
            self._raw = self._kombu.connection
            self._pub = self._raw.channel()
            self._pub.confirm_select()
            self._pub.events["basic_ack"].add(self._on_ack)
            self._pub.events["basic_nack"].add(self._on_nack)
            self._pub.events["basic_return"].add(self._on_return)
            self._info = self._raw.channel()
            if self.on_connect is not None:
                self.on_connect(self._kombu)
        except BROKER_ERRORS as exc:
            raise BrokerUnavailable(f"broker {self._safe_url()}: cannot connect: {exc}") from exc
        self._tag = 0
        self._pending.clear()

    def close(self) -> None:
        if self._kombu is not None:
            # Closing a connection that already broke: nothing is left to release.
            with contextlib.suppress(*BROKER_ERRORS):
                self._kombu.release()
        self._kombu = self._raw = self._pub = self._info = None

    def _safe_url(self) -> str:
        return str(Connection(self.broker_url).as_uri())

    def depth(self, queue: str) -> int:
        """Messages ready in ``queue``."""
        if self._info is None:
            self.connect()
        try:
            _, count, _ = self._info.queue_declare(queue=queue, passive=True)
        except BROKER_ERRORS as exc:
            raise BrokerUnavailable(f"broker: cannot read the depth of {queue}: {exc}") from exc
        return int(count)

    def publish(self, rows: list[Claimed]) -> None:
        """Publish ``rows`` to their bucket queues; return once the broker confirmed all."""
        self._publish_all([(self.exchange, bucket_table().get(row.bucket).queue,
                            task_message(row)) for row in rows])

    def publish_dead(self, rows: list[Claimed], reason: str | None = None) -> None:
        """Put poison jobs on their buckets' dead-letter queues; return once confirmed."""
        self._publish_all([(DEAD_EXCHANGE.name, bucket_table().get(row.bucket).dead_queue,
                            dead_message(row, reason)) for row in rows])

    def channel(self) -> Any:
        """A new plain channel on this connection (the dead-letter sweep reads with it)."""
        if self._raw is None:
            self.connect()
        try:
            return self._raw.channel()
        except BROKER_ERRORS as exc:
            raise BrokerUnavailable(f"broker: cannot open a channel: {exc}") from exc

    def _publish_all(self, messages: list[tuple[str, str, TaskMessage]]) -> None:
        if self._pub is None:
            self.connect()
        self._failures.clear()
        try:
            self._send(messages)
            self._wait_for_confirms()
        except BROKER_ERRORS as exc:
            raise BrokerUnavailable(f"broker: publishing {len(messages)} messages failed: "
                                    f"{exc}") from exc
        if self._failures:
            raise BrokerUnavailable(f"broker refused {len(self._failures)} of {len(messages)} "
                                    f"messages: {self._failures[0]}")

    def _send(self, messages: list[tuple[str, str, TaskMessage]]) -> None:
        """Write the batch's frames in one go (a message too big for one frame goes
        through py-amqp, which splits it)."""
        channel, limit = self._pub.channel_id, self._raw.frame_max - 8
        out: list[bytes] = []
        for exchange, routing_key, msg in messages:
            if len(msg.body) <= limit:
                out.append(frames.publish(channel, exchange, routing_key, msg.body,
                                          msg.headers, msg.task_id, mandatory=True))
            else:
                self._write(out)
                self._pub.basic_publish(msg.as_amqp(), exchange=exchange,
                                        routing_key=routing_key, mandatory=True)
            self._tag += 1
            self._pending.add(self._tag)
        self._write(out)

    def _write(self, chunks: list[bytes]) -> None:
        if chunks:
            self._raw.transport.write(b"".join(chunks))
            chunks.clear()

    def _wait_for_confirms(self) -> None:
        deadline = time.monotonic() + self.confirm_timeout
        while self._pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrokerUnavailable(f"broker did not confirm {len(self._pending)} messages "
                                        f"within {self.confirm_timeout:.0f}s")
            self._raw.drain_events(timeout=left)

    def _on_ack(self, tag: int, multiple: bool) -> None:
        if multiple:
            self._pending = {t for t in self._pending if t > tag}
        else:
            self._pending.discard(tag)

    def _on_nack(self, tag: int, multiple: bool) -> None:
        self._failures.append(f"nack of delivery tag {tag}")
        self._on_ack(tag, multiple)

    def _on_return(self, exc: Any, exchange: str, routing_key: str, message: Any) -> None:
        self._failures.append(f"returned unroutable from {exchange!r} with key "
                              f"{routing_key!r}: {exc}")
