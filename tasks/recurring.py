"""``tasks.recurring_message``: process a message, then schedule its own next run.

The message's payload says how it recurs: ``{"every": <seconds>, "runs": <left>}``.
After its bucket's work the task reschedules itself with the same job key,
one row update in the due-jobs store, until ``runs`` reaches zero (``runs``
null or absent: forever). The finished job's row is then removed.
"""

from __future__ import annotations

import time
from typing import Any

from config.errors import InvalidMessage
from config.settings import settings
from routing.messages import Message
from tasks import completions
from tasks.app import app
from tasks.base import MessageTask
from tasks.process import simulated_work_seconds
from tasks.redis_conn import get_redis


def next_run(msg: Message) -> tuple[float, Message] | None:
    """(delay, next message) when the message recurs again, else None."""
    payload = msg["payload"]
    if not isinstance(payload, dict) or not isinstance(payload.get("every"), int | float):
        raise InvalidMessage("payload", "a recurring message needs {'every': seconds, "
                             "'runs': count or null}")
    runs = payload.get("runs")
    if runs is not None and runs <= 1:
        return None
    nxt = Message(**msg)
    nxt["payload"] = {**payload, "runs": None if runs is None else runs - 1}
    return float(payload["every"]), nxt


@app.task(bind=True, base=MessageTask, name="tasks.recurring_message")
def recurring_message(self: MessageTask, message: Any) -> dict[str, Any]:
    """Process one run of a recurring message, then reschedule it."""
    msg = self.message(message)
    started = time.time()
    time.sleep(simulated_work_seconds(msg["bucket"]))  # stands in for the message's I/O
    done = completions.Completion(
        message_id=msg["id"], bucket=msg["bucket"], worker=self.worker_name,
        redelivered=self.redelivered, started=started, finished=time.time())
    completions.record(get_redis(), settings(), done)
    again = next_run(msg)
    if again is not None:
        self.apply_async((again[1],), countdown=again[0])
    return {"id": msg["id"], "bucket": msg["bucket"], "again": again is not None}
