"""A claimed row's Celery task message (protocol 2), and its dead-letter copy.

Built row by row before anything is sent (scheduler/outgoing.py frames it,
scheduler/publisher.py sends it); the seed's broker sink builds its plain
messages here too, so every message recur publishes itself has one shape.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

import amqp

from config import signing
from config.settings import settings
from routing import tracing
from scheduler.store import Claimed
from scheduler.wire import DISPATCH_HEADER, decode_call, decode_traced, dispatch_header

#: Celery protocol 2 "embed" part: no callbacks, errbacks, chain or chord.
EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


@dataclass(frozen=True)
class TaskMessage:
    """A Celery (protocol 2) task message for one claimed row."""

    task_id: str
    body: bytes
    headers: dict[str, Any]

    @property
    def correlation_id(self) -> str:
        """The AMQP correlation id: the task id, or a UUID of it when the id (a job key
        may be 512 bytes) is too long for an AMQP short string; Celery reads ``id``."""
        if len(self.task_id) <= 63 or len(self.task_id.encode()) <= 255:
            return self.task_id
        return str(uuid.uuid5(uuid.NAMESPACE_OID, self.task_id))

    def as_amqp(self) -> amqp.Message:
        """The same message for py-amqp (used when it is too big for one frame)."""
        return amqp.Message(self.body, content_type="application/json",
                            content_encoding="utf-8", application_headers=self.headers,
                            delivery_mode=2, correlation_id=self.correlation_id)


def task_message(row: Claimed) -> TaskMessage:
    """The task message for ``row``, carrying its job key, token and lease stamp."""
    args, kwargs, retries, trace = decode_traced(row.args, row.job_key, row.bucket)
    # The job key is every run's Celery task id: the result backend holds the job's
    # latest run under it, so apply_async's AsyncResult (tasks/stored_result.py) finds it.
    task_id = row.job_key
    # Only the headers a Celery worker requires (it defaults the others): every
    # header costs encoding time on the hot path.
    headers: dict[str, Any] = {
        "task": row.task, "id": task_id,
        DISPATCH_HEADER: dispatch_header(row.job_key, row.token, row.lease_until, row.due_at),
    }
    signing.sign(headers, settings().signing_key)  # RECUR_SIGNING_KEY; none: unsigned
    if retries:
        headers["retries"] = retries
    tracing.carry(headers, trace)  # the stored run's context, for the next run's link
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


def plain_message(task: str, args: list[Any]) -> TaskMessage:
    """A plain message of ``task`` called with ``args`` (no row, no dispatch header):
    what the seed's broker sink publishes for each seeded message."""
    task_id = str(uuid.uuid4())
    body = json.dumps([args, {}, EMBED], separators=(",", ":")).encode()
    return TaskMessage(task_id, body, {"task": task, "id": task_id})
