"""A user's own task module, written into a temporary directory outside the package.

The tests put the directory on the PYTHONPATH of the processes they start and
name the module in RECUR_IMPORTS, as a user would; the test process itself never
imports it.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import redis

SOURCE = '''
"""Someone's own tasks: one sync, one async, both recurring and under the user lock."""

import asyncio
import json
import os
import threading
import time

from config.settings import settings
from tasks import MessageTask, app
from tasks.distlock import user_lock
from routing.redis_client import get_redis

KEY = settings().key_prefix + ":test:usertasks"


def record(message, kind, event, **extra):
    get_redis().rpush(KEY, json.dumps({
        "id": message["id"], "user": message["user_id"], "kind": kind, "ev": event,
        "run": message["payload"]["run"], "t": time.time(), "pid": os.getpid(),
        "thread": threading.current_thread().name, **extra}))


def again(task, message):
    """Reschedule with the payload's countdown until ``runs`` runs are done."""
    payload = message["payload"]
    if payload["run"] < payload["runs"]:
        task.apply_async(({**message, "payload": {**payload, "run": payload["run"] + 1}},),
                         countdown=payload["every"])


@app.task(bind=True, base=MessageTask, name="{module}.sync_job")
@user_lock()
def sync_job(self, message):
    msg = self.message(message)
    record(msg, "sync", "start")
    time.sleep(msg["payload"]["ms"] / 1000)
    record(msg, "sync", "end")
    again(self, message)


@app.task(bind=True, base=MessageTask, name="{module}.async_job")
@user_lock()
async def async_job(self, message):
    msg = self.message(message)
    loop = id(asyncio.get_running_loop())
    record(msg, "async", "start", loop=loop)
    await asyncio.sleep(msg["payload"]["ms"] / 1000)
    record(msg, "async", "end", loop=loop)
    again(self, message)
'''


def write_user_module(directory: Path) -> str:
    """Write the module under ``directory``; return its (unique) module name."""
    name = f"usertasks_{uuid.uuid4().hex[:8]}"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.py").write_text(SOURCE.replace("{module}", name))
    return name


def user_records(client: redis.Redis, key_prefix: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in client.lrange(f"{key_prefix}:test:usertasks", 0, -1)]
