"""One claimed row's message, built and checked before anything is sent.

Every check that needs no answer from the broker happens here, row by row, so
a row that cannot be published is judged on its own at once (building it
again gives the same answer) and the rest of its batch goes out: a key or a
call over the bounds (scheduler/bounds.py), a bucket no longer in the bucket
table, a stored call that cannot be decoded, headers larger than one frame
(the broker would close the whole connection over such a frame:
``frame_too_large``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from config.buckets_in_use import bucket_table
from config.errors import InvalidMessage
from scheduler import frames
from scheduler.bounds import Limits, row_problem, stored_text_problem
from scheduler.refusals import (
    TOO_LARGE,
    UNDECODABLE,
    UNKNOWN_BUCKET,
    Refusal,
    unknown_bucket_reason,
)
from scheduler.store import Claimed
from scheduler.task_message import TaskMessage

#: Builds a row's message (a task message, or a dead letter).
Build = Callable[[Claimed], TaskMessage]
#: (exchange, routing key) of a row's message; None: its bucket is not in the table.
Route = tuple[str, str] | None
#: Bytes of a frame's own header and end marker (type, channel, size; 0xCE).
FRAME_OVERHEAD = 8


@dataclass(frozen=True)
class Outgoing:
    """A message ready to send: its encoded frames, or None when its body takes
    several frames (py-amqp splits it). ``row`` is None for a bare message."""

    exchange: str
    routing_key: str
    message: TaskMessage
    frames: bytes | None
    row: Claimed | None = None
    build: Build | None = None
    #: Sent again, with a new lease stamp, while a refused row was isolated.
    restamped: bool = False


def header_frame_size(data: bytes) -> int:
    """Payload bytes of the content header frame of ``frames.publish``'s output."""
    method = int.from_bytes(data[3:7], "big")
    start = 7 + method + 1
    return int.from_bytes(data[start + 3:start + 7], "big")


def unknown_bucket(bucket: str) -> Refusal:
    return Refusal(UNKNOWN_BUCKET, unknown_bucket_reason(bucket, bucket_table().names))


@dataclass(frozen=True)
class Framing:
    """How messages are encoded on one publish channel, and the rows' bounds."""

    channel_id: int
    frame_max: int
    limits: Limits

    def prepare(self, row: Claimed, route: Route, build: Build, *,
                restamped: bool = False) -> Outgoing | Refusal:
        """The row's message, or why the row cannot be published."""
        problem = row_problem(row.job_key, row.args, self.limits)
        if problem is not None:
            return Refusal(TOO_LARGE, problem)
        if route is None:
            return unknown_bucket(row.bucket)
        if not row.task:
            return Refusal(UNDECODABLE, "its task code has no name in due_tasks")
        problem = stored_text_problem(row.args)
        if problem is not None:
            return Refusal(UNDECODABLE, problem)
        try:
            message = build(row)
        except InvalidMessage as exc:
            return Refusal(UNDECODABLE, str(exc))
        return self.encode(*route, message, row, build, restamped=restamped)

    def encode(self, exchange: str, routing_key: str, message: TaskMessage,
               row: Claimed | None = None, build: Build | None = None, *,
               restamped: bool = False) -> Outgoing | Refusal:
        """Encode ``message``'s frames; refuse headers that do not fit one frame."""
        limit = self.frame_max - FRAME_OVERHEAD
        try:
            data = frames.publish(self.channel_id, exchange, routing_key, message.body,
                                  message.headers, message.correlation_id, mandatory=True)
        except (ValueError, TypeError, OverflowError, struct.error) as exc:
            return Refusal(UNDECODABLE, f"its message cannot be encoded: {exc}")
        if len(data) - len(message.body) > limit:
            head = header_frame_size(data)
            if head > limit:
                return Refusal(TOO_LARGE, f"its message headers take {head} bytes, over the "
                                          f"broker's frame size ({limit} bytes)")
        return Outgoing(exchange, routing_key, message,
                        data if len(message.body) <= limit else None, row, build, restamped)
