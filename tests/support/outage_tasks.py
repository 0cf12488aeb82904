"""A user's own recurring task, for the outage tests (loaded with ``--include``).

It is written as a user would write one on ``MessageTask``: do the work, log
the completion, reschedule itself with a countdown until its runs are used
up. Every run is also appended to a plain file (``OUTAGE_RUNS_FILE``), which
no outage of PostgreSQL, Redis or RabbitMQ can lose: the test counts runs and
duplicates from it.
"""

from __future__ import annotations

import os
import time
from typing import Any

from config.errors import StoreError
from config.settings import settings
from routing.redis_client import get_redis
from tasks import completions
from tasks.app import app
from tasks.base import MessageTask

RUNS_FILE = "OUTAGE_RUNS_FILE"
INCLUDE = ("--include", "tests.support.outage_tasks")
TASK = "tests.outage_recurring"


def outage_message(ident: str, bucket: str, every: float, runs: int) -> dict[str, Any]:
    """A message that runs ``runs`` times, ``every`` seconds apart."""
    return {"id": ident, "user_id": f"user-{ident}", "bucket": bucket,
            "payload": {"every": every, "runs": runs, "run": 1}}


def append_run(message_id: str, run: int) -> None:
    """One line per run, written with O_APPEND (whole lines from many processes)."""
    line = f"{message_id} {run} {time.time():.3f} {os.getpid()}\n".encode()
    fd = os.open(os.environ[RUNS_FILE], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@app.task(bind=True, base=MessageTask, name=TASK)
def outage_recurring(self: MessageTask, message: Any) -> None:
    msg = self.message(message)
    payload = message["payload"]
    append_run(msg["id"], payload["run"])
    completions.record(get_redis(), settings(), completions.Completion(
        message_id=msg["id"], bucket=msg["bucket"], worker=self.worker_name,
        redelivered=self.redelivered, started=time.time(), finished=time.time()))
    if payload["run"] < payload["runs"]:
        following = {**message, "payload": {**payload, "run": payload["run"] + 1}}
        self.apply_async((following,), countdown=payload["every"])


def flag(name: str) -> str:
    return f"{settings().key_prefix}:test:footgun:{name}"


def wait_for_flag(name: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not get_redis().exists(flag(name)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"flag {name} never set")
        time.sleep(0.05)


@app.task(bind=True, base=MessageTask, name="tests.catch_failed_reschedule")
def catch_failed_reschedule(self: MessageTask, message: Any) -> None:
    """The footgun: the first run's reschedule fails (the test stops the database) and
    the task swallows the error; it returns once the database is back."""
    msg = self.message(message)
    run = int(get_redis().incr(flag(f"runs:{msg['id']}")))
    if run > 1:
        return  # the second run: the job is done
    get_redis().set(flag("started"), 1)
    wait_for_flag("down")
    try:
        self.apply_async((message,), countdown=1)
    except StoreError:
        get_redis().set(flag("caught"), 1)
    wait_for_flag("up")
