"""A task that keeps its results, for the stored-call AsyncResult tests; loaded by
workers with ``--include``."""

from __future__ import annotations

from typing import Any

from config.settings import settings
from tasks.app import app
from tasks.base import MessageTask
from tests.support.recorder import recorder

INCLUDE = ("--include", "tests.support.result_tasks")


def runs_key() -> str:
    return f"{settings().key_prefix}:test:answer-runs"


def runs() -> list[str]:
    """The message ids ``tests.answer`` ran, in order."""
    return [str(one) for one in recorder().lrange(runs_key(), 0, -1)]


@app.task(bind=True, base=MessageTask, name="tests.answer", ignore_result=False)
def answer(self: MessageTask, message: Any) -> dict[str, Any]:
    """Return twice ``payload.n``; with ``payload.again`` > 0, run again in a second
    (a recurring job: its own reschedule, ``again`` one less) first."""
    msg = self.message(message)
    payload = msg["payload"]
    recorder().rpush(runs_key(), msg["id"])
    again = int(payload.get("again", 0))
    if again > 0:
        self.apply_async(({**msg, "payload": {**payload, "n": payload["n"] + 1,
                                                "again": again - 1}},), countdown=1)
    return {"id": msg["id"], "answer": payload["n"] * 2}
