"""``tasks.process_message``: one message, bucket-sized simulated I/O work, and,
for a recurring message, its own next run.

A message recurs when its payload is an object with ``"every": <seconds>``
(and optionally ``"runs": <runs left>``; absent or null: forever). After the
work the task reschedules itself with the same job key: one row update in the
due-jobs store. Any other payload is processed once.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from config.buckets_in_use import bucket_table
from config.settings import settings
from routing.messages import Message
from routing.recurrence import jittered_due, recurrence_of
from routing.redis_client import get_redis
from scheduler.calls import utcnow
from scheduler.wire import dispatch_of
from tasks import completions
from tasks.app import app
from tasks.base import MessageTask


def simulated_work_seconds(bucket: str) -> float:
    """How long a message of ``bucket`` works: the bucket's time times RECUR_WORK_SCALE."""
    return bucket_table().get(bucket).work_seconds * settings().work_scale


def next_run(msg: Message | Mapping[str, Any]) -> tuple[float, dict[str, Any]] | None:
    """(delay, next message) when the message recurs again, else None.

    The next message keeps the caller's form (``bucket`` or ``kind``); only its
    payload's ``runs`` changes.
    """
    payload = msg["payload"]
    recurrence = recurrence_of(payload, min_every=0.0)
    if recurrence is None or not recurrence.again:
        return None
    # A row stored before RECUR_MIN_EVERY was raised (or written around apply_async)
    # runs at the minimum, never back to back, and is not lost for it.
    every = max(recurrence.every, settings().min_every)
    changed = {"every": every} if every != recurrence.every else {}
    return every, {**msg, "payload": {**payload, **changed,
                                      "runs": recurrence.after_this_run().runs}}


def phase_due(task: MessageTask, msg: Message, payload: dict[str, Any]) -> datetime | None:
    """The next run's due time on its key's phase (routing/jitter.py), or None without
    jitter (the default: it is ``every`` after now, and nothing more is read)."""
    jitter = bucket_table().get(msg["bucket"]).jitter
    if not jitter and not payload.get("jitter"):
        return None
    running = dispatch_of(task.request)
    return jittered_due(payload, jitter, msg["id"] if running is None else running.job_key,
                        None if running is None else running.ran_due, utcnow())


@app.task(bind=True, base=MessageTask, name="tasks.process_message", recurs_by_payload=True)
def process_message(self: MessageTask, message: Any) -> dict[str, Any]:
    """Process one message, log the completion, and reschedule it if it recurs."""
    msg = self.message(message)
    again = next_run(message)  # a malformed schedule fails before the work, not after
    started = time.time()
    time.sleep(simulated_work_seconds(msg["bucket"]))  # stands in for the message's I/O
    done = completions.Completion(
        message_id=msg["id"], bucket=msg["bucket"], worker=self.worker_name,
        redelivered=self.redelivered, started=started, finished=time.time())
    completions.record(get_redis(), settings(), done)
    if again is not None:
        due = phase_due(self, msg, again[1]["payload"])
        if due is None:
            self.apply_async((again[1],), countdown=again[0])
        else:
            self.apply_async((again[1],), eta=due)
    return {"id": msg["id"], "bucket": msg["bucket"], "again": again is not None}
