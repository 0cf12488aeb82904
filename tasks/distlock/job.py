"""What a locked job carries and what it shows: its ticket (message headers), its
parked JSON, the grant a running job holds, and its visible events (log lines,
Prometheus counters, and the Celery event ``task-parked``)."""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from dataclasses import dataclass
from typing import Any

from celery.worker.request import Request

from config import signing
from config.errors import InvalidControlHeader
from config.lazy_metrics import counter
from config.text import brief
from routing.redis_client import out_of_memory

log = logging.getLogger("recur.distlock")

SEQ = "recur_lock_seq"
SINCE = "recur_lock_since"
#: Headers of the previous design's tickets (per-user numbers in an epoch): a message
#: published before an upgrade is numbered again on arrival, by its task id.
OLD_TICKET_HEADERS = frozenset({"recur_lock_epoch", "recur_lock_handover"})
TICKET_HEADERS = frozenset({SEQ, SINCE, *OLD_TICKET_HEADERS})
#: What a parked (dropped) delivery returns; the worker reports it as the Celery
#: event ``task-parked`` (``task-dropped``) instead of ``task-succeeded``.
PARKED_RESULT, DROPPED_RESULT = "recur:parked", "recur:dropped"

EVENTS = counter("recur_lock_events", "Per-user lock events by kind and task.",
                 ["event", "task"])


@dataclass(frozen=True)
class Ticket:
    """A job's place in its user's line: its number (0: numbered on arrival) and its
    submission time. Custom headers, so Celery retries and handovers keep them."""

    seq: int = 0
    since: float = 0.0

    @classmethod
    def from_request(cls, request: Any, key: str = "", task: str = "") -> Ticket:
        """The ticket of the running task (defaults when it was published without one).

        Headers are input: a number that is not a whole number >= 0, a time that is
        not a finite number >= 0, or (with a signing ``key``) a header not signed for
        this job of ``task`` is refused with InvalidControlHeader (dead-lettered)."""
        headers = getattr(request, "headers", None) or {}

        def get(name: str) -> Any:
            return headers.get(name, getattr(request, name, None))

        seq, since = get(SEQ), get(SINCE)
        for name, value in ((SEQ, seq), (SINCE, since)):
            signing.verify(key, getattr(request, "id", None),
                           task or getattr(request, "task", None), name, value,
                           get(signing.SIG_HEADER))
        old = any(headers.get(name) is not None for name in OLD_TICKET_HEADERS)
        return cls(seq=0 if old else whole_number(seq), since=moment(since))

    def headers(self) -> dict[str, Any]:
        """Celery ``headers=`` for publishing a job with this ticket."""
        return {SEQ: self.seq, SINCE: self.since}

    def waited(self, now: float | None = None) -> float:
        """Seconds since the job was submitted (0 when unknown)."""
        return max(0.0, (now or time.time()) - self.since) if self.since else 0.0


def whole_number(value: Any) -> int:
    """A ``recur_lock_seq`` header as a number (None: 0, numbered on arrival)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidControlHeader(SEQ, f"must be a whole number >= 0, got {brief(value, 40)}")
    return value


#: Largest ``recur_lock_since`` read as a time (a larger int overflows a float).
MAX_SINCE = sys.float_info.max


def moment(value: Any) -> float:
    """A ``recur_lock_since`` header as seconds since the epoch (None: 0.0, unknown)."""
    if value is None:
        return 0.0
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not -MAX_SINCE <= value <= MAX_SINCE  # an int past float range: no time
            or not math.isfinite(value) or value < 0):
        raise InvalidControlHeader(SINCE, f"must be a finite time >= 0 (seconds since the "
                                   f"epoch), got {brief(value, 40)}")
    return float(value)


@dataclass(frozen=True)
class ParkedJob:
    """A job waiting in Redis for its user: enough to run or publish it again."""

    task: str
    id: str
    args: list[Any]
    kwargs: dict[str, Any]
    since: float
    #: The message's other custom headers (e.g. the scheduler's dispatch token).
    headers: dict[str, Any]

    def to_json(self) -> str:
        """Deterministic JSON: two copies of one job park as one entry."""
        return json.dumps({"task": self.task, "id": self.id, "args": self.args,
                           "kwargs": self.kwargs, "since": self.since,
                           "headers": self.headers},
                          sort_keys=True, separators=(",", ":"), default=str)

    @classmethod
    def from_json(cls, text: str) -> ParkedJob:
        """The job parked as ``text``; ValueError when it is not one (not written by
        recur: malformed JSON, a missing field, a field of the wrong type)."""
        try:
            raw = json.loads(text)
            return cls(task=raw["task"], id=raw["id"], args=list(raw["args"]),
                       kwargs=dict(raw["kwargs"]), since=float(raw["since"]),
                       headers=dict(raw.get("headers") or {}))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{type(exc).__name__}: {exc}") from None


def other_headers(request: Any) -> dict[str, Any]:
    """The custom headers of ``request`` that are not the lock's own ticket."""
    headers = getattr(request, "headers", None) or {}
    return {k: v for k, v in headers.items() if k not in TICKET_HEADERS}


def number_key(task_id: str, dispatch: Any) -> str:
    """Which deliveries are copies of one job, for numbering on arrival: its task id,
    and for a scheduler dispatch its token too. Every run of a stored job carries the
    job key as its task id (tasks/stored_result.py), so the id alone would make a
    job's next run a copy of its last; a redelivered copy keeps its token.
    ``dispatch``: the delivery's raw dispatch header (scheduler/wire.py), or None."""
    if isinstance(dispatch, (list, tuple)) and len(dispatch) > 1:
        return f"{task_id}#{dispatch[1]}"
    return task_id


@dataclass(frozen=True)
class LockGrant:
    """The lock a running task holds (``self.request.user_lock``); ``fence`` only
    grows, so a downstream write can refuse a holder older than one it has seen."""

    user: str
    token: str
    seq: int
    fence: int


def fencing_token(task: Any) -> int | None:
    """The fencing token of the lock ``task`` holds (None when it runs unlocked)."""
    grant = getattr(task.request, "user_lock", None)
    return grant.fence if isinstance(grant, LockGrant) else None


class ParkAwareRequest(Request):  # type: ignore[misc]
    """The worker's request of a message task: a parked (dropped) delivery is reported
    as the Celery event ``task-parked`` (``task-dropped``), so Flower shows the state
    PARKED (DROPPED), not a success. Set as ``MessageTask.Request``."""

    def send_event(self, type: str, **fields: Any) -> None:
        if type == "task-succeeded":
            result = str(fields.get("result", ""))
            for marker, event in ((PARKED_RESULT, "task-parked"),
                                  (DROPPED_RESULT, "task-dropped")):
                if marker in result[:16]:
                    type, fields = event, {"info": result.strip("'\""), **fields}
        super().send_event(type, **fields)


def parked(task: str, job_id: str, user: str, seq: int) -> str:
    """The user was busy (or an earlier job had not finished): the job is parked."""
    EVENTS.labels("skipped_busy", task).inc()
    log.info("skipped: user busy: task %s job %s user %s parked as #%d; it runs when the "
             "jobs before it have finished", task, job_id, user, seq)
    return f"{PARKED_RESULT} user={user} #{seq}"


def refused(task: str, job_id: str, user: str, seq: int, why: str) -> None:
    EVENTS.labels(why, task).inc()
    log.warning("dropped: job %s (%s) of user %s #%d: %s", job_id, task, user, seq,
                {"duplicate": "it already ran (a second copy)"}.get(why, why))


def redis_down(task: str, job_id: str, user: str, delay: float, error: Exception,
               level: int = logging.WARNING) -> None:
    """Redis out of memory is event ``redis_oom``, said once a minute per process by
    routing/redis_client.py: each job's line is INFO, not one WARNING per delivery."""
    oom = out_of_memory(error)
    EVENTS.labels("redis_oom" if oom else "redis_down", task).inc()
    log.log(logging.INFO if oom else level, "not run: lock of user %s unavailable for job "
            "%s (%s): %s; re-enqueued in %.1fs (fail closed)", user, job_id, task, error, delay)


def park_full(task: str, job_id: str, user: str, seq: int, delay: float) -> None:
    EVENTS.labels("park_full", task).inc()
    log.warning("not parked: user %s has RECUR_LOCK_MAX_PARKED jobs parked; job %s (%s) #%d "
                "waits in the broker, published again in %.1fs with its place in line",
                user, job_id, task, seq, delay)


def unlocked(task: str, job_id: str, user: str, error: Exception) -> None:
    EVENTS.labels("unlocked", task).inc()
    log.warning("running UNLOCKED: job %s (%s) of user %s: %s "
                "(RECUR_LOCK_WHEN_REDIS_DOWN=run-unlocked)", job_id, task, user, error)


def lease_lost(user: str, token: str) -> None:
    EVENTS.labels("lease_lost", "").inc()
    log.error("lock of user %s lost by its holder (token %s…): the lease expired under "
              "the task; its fencing token is stale", user, token[:8])


def handover_failed(user: str, job_id: str, error: Exception) -> None:
    EVENTS.labels("handover_failed", "").inc()
    log.warning("could not publish job %s of user %s after a handover: %s; the reaper "
                "hands it over again after RECUR_LOCK_GAP_TIMEOUT", job_id, user, error)
