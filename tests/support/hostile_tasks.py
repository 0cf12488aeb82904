"""Tasks for the hostile-input tests, imported by their workers (RECUR_IMPORTS).

``tests.reseq_sized`` is a registered resequencer step whose result is as long as
the message asks (``payload["size"]`` characters). ``tests.not_a_step`` is an
ordinary task a forged message names as a step: it counts every call, so a test
can show it never ran.
"""

from __future__ import annotations

from typing import Any

from config.settings import settings
from routing.redis_client import get_redis
from tasks.app import app
from tasks.reseq_steps import reseq_step

SIZED_STEP = "tests.reseq_sized"
NOT_A_STEP = "tests.not_a_step"


def calls_key() -> str:
    return f"{settings().key_prefix}:test:not-a-step-calls"


@reseq_step
@app.task(name=SIZED_STEP)
def sized(message: Any) -> Any:
    return {"id": message["id"], "text": "x" * int(message["payload"].get("size", 1))}


@app.task(name=NOT_A_STEP)
def not_a_step(message: Any) -> Any:
    get_redis().incr(calls_key())
    return message
