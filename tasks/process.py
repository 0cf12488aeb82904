"""``tasks.process_message``: one message, bucket-sized simulated I/O work."""

from __future__ import annotations

import time
from typing import Any

from config.buckets import BUCKETS_BY_NAME
from config.settings import settings
from tasks import completions
from tasks.app import app
from tasks.base import MessageTask
from tasks.redis_conn import get_redis


def simulated_work_seconds(bucket: str) -> float:
    """How long a message of ``bucket`` works: the bucket's time times RECUR_WORK_SCALE."""
    return BUCKETS_BY_NAME[bucket].work_seconds * settings().work_scale


@app.task(bind=True, base=MessageTask, name="tasks.process_message")
def process_message(self: MessageTask, message: Any) -> dict[str, Any]:
    """Process one message: validate it, do its bucket's work, log the completion."""
    msg = self.message(message)
    started = time.time()
    time.sleep(simulated_work_seconds(msg["bucket"]))  # stands in for the message's I/O
    done = completions.Completion(
        message_id=msg["id"], bucket=msg["bucket"], worker=self.worker_name,
        redelivered=self.redelivered, started=started, finished=time.time())
    completions.record(get_redis(), settings(), done)
    return {"id": msg["id"], "bucket": msg["bucket"], "worker": done.worker}
