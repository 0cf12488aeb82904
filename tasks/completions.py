"""An optional, capped log of completed task runs in Redis: what the demo and operators read.

Each run of a message task appends one entry (message id, bucket, worker,
whether the broker redelivered it, start and end times) to a stream trimmed
to RECUR_COMPLETION_LOG_MAXLEN, and bumps a per-bucket counter. The log is
bounded, so it never grows with the population.

It is an observation, not part of a job's state: the due-jobs row decides
what runs next. So a run is never failed because the log cannot be written
(Redis down): the entry is skipped, a warning is logged, and the run goes on
to reschedule or finish its job. Readers must treat the log as a sample that
can miss entries during a Redis outage (and can show a run twice when a
worker died after logging it and the broker redelivered the message).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import redis

from config import keys
from config.errors import ServiceUnavailable
from config.settings import Settings
from routing.redis_client import redis_errors

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Completion:
    """One finished run of a message task."""

    message_id: str
    bucket: str
    worker: str
    redelivered: bool
    started: float
    finished: float
    stream_id: str = ""


def record(client: redis.Redis, cfg: Settings, done: Completion) -> bool:
    """Append ``done`` to the log and count it; False when it was not written (the log
    is off, or Redis cannot be reached: logged, never raised)."""
    if cfg.completion_log_maxlen == 0:
        return False
    fields: dict[str, str | float | int] = {
        "id": done.message_id, "bucket": done.bucket, "worker": done.worker,
        "redelivered": int(done.redelivered), "started": done.started,
        "finished": done.finished,
    }
    try:
        with redis_errors():
            pipe = client.pipeline(transaction=False)
            pipe.xadd(keys.completed(cfg.key_prefix), fields,  # type: ignore[arg-type]
                      maxlen=cfg.completion_log_maxlen, approximate=True)
            pipe.hincrby(keys.processed_counts(cfg.key_prefix), done.bucket, 1)
            pipe.execute()
    except ServiceUnavailable as exc:  # "Redis: <what redis-py said>"
        log.warning("completion of %s not logged (the log is optional, the run goes on): "
                    "%s", done.message_id, exc)
        return False
    return True


def read_since(client: redis.Redis, cfg: Settings, after: str = "0-0",
               count: int = 10_000) -> list[Completion]:
    """Completions logged after stream id ``after``, oldest first."""
    entries: Any = client.xrange(keys.completed(cfg.key_prefix), min=f"({after}", count=count)
    return [_from_entry(stream_id, fields) for stream_id, fields in entries]


def last_id(client: redis.Redis, cfg: Settings) -> str:
    """Stream id of the newest entry ("0-0" when empty): read_since it to see only new ones."""
    newest = client.xrevrange(keys.completed(cfg.key_prefix), count=1)
    return str(newest[0][0]) if newest else "0-0"


def _from_entry(stream_id: str, f: dict[str, str]) -> Completion:
    return Completion(message_id=f["id"], bucket=f["bucket"], worker=f["worker"],
                      redelivered=f["redelivered"] == "1", started=float(f["started"]),
                      finished=float(f["finished"]), stream_id=stream_id)
