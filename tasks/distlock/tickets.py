"""What a locked job carries in its message headers, and a parked job's JSON.

A job's *ticket* (sequence number, epoch, submission time, handover token)
travels in custom Celery headers, so it survives Celery retries (which copy
the headers) and handovers (which republish with them), while the message
itself keeps the contract of routing/messages.py.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

SEQ = "recur_lock_seq"
EPOCH = "recur_lock_epoch"
SINCE = "recur_lock_since"
HANDOVER = "recur_lock_handover"
TICKET_HEADERS = frozenset({SEQ, EPOCH, SINCE, HANDOVER})


@dataclass(frozen=True)
class Ticket:
    """A job's place in its user's line."""

    seq: int = 0
    epoch: str = ""
    since: float = 0.0
    handover: str = ""

    @classmethod
    def from_request(cls, request: Any) -> Ticket:
        """The ticket of the running task (defaults when it was published without one)."""
        headers = getattr(request, "headers", None) or {}

        def get(name: str, default: Any) -> Any:
            value = headers.get(name, getattr(request, name, None))
            return default if value is None else value

        return cls(seq=int(get(SEQ, 0)), epoch=str(get(EPOCH, "")),
                   since=float(get(SINCE, 0.0)), handover=str(get(HANDOVER, "")))

    def headers(self) -> dict[str, Any]:
        """Celery ``headers=`` for publishing a job with this ticket."""
        return {SEQ: self.seq, EPOCH: self.epoch, SINCE: self.since, HANDOVER: self.handover}

    def waited(self, now: float | None = None) -> float:
        """Seconds since the job was submitted (0 when unknown)."""
        return max(0.0, (now or time.time()) - self.since) if self.since else 0.0


@dataclass(frozen=True)
class ParkedJob:
    """A job waiting in Redis for its user: enough to publish it again."""

    task: str
    id: str
    args: list[Any]
    kwargs: dict[str, Any]
    since: float
    #: The message's other custom headers (e.g. the scheduler's dispatch token),
    #: published again with the job so it settles as the same job.
    headers: dict[str, Any]

    def to_json(self) -> str:
        """Deterministic JSON: two copies of one job park as one entry."""
        return json.dumps({"task": self.task, "id": self.id, "args": self.args,
                           "kwargs": self.kwargs, "since": self.since,
                           "headers": self.headers},
                          sort_keys=True, separators=(",", ":"), default=str)

    @classmethod
    def from_json(cls, text: str) -> ParkedJob:
        raw = json.loads(text)
        return cls(task=raw["task"], id=raw["id"], args=list(raw["args"]),
                   kwargs=dict(raw["kwargs"]), since=float(raw["since"]),
                   headers=dict(raw.get("headers") or {}))


def other_headers(request: Any) -> dict[str, Any]:
    """The custom headers of ``request`` that are not the lock's own ticket."""
    headers = getattr(request, "headers", None) or {}
    return {k: v for k, v in headers.items() if k not in TICKET_HEADERS}
