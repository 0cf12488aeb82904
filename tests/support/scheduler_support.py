"""Helpers for the scheduler tests: recurring messages, their rows, their runs."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select

from config.buckets_in_use import BUCKETS
from config.settings import settings
from routing.redis_client import get_redis
from scheduler.store import DueStore, Job
from scheduler.store.schema import due_jobs
from tasks import completions
from tests.support.processes import wait_for

RECURRING = "tasks.process_message"


def recurring_message(ident: str, bucket: str, every: float, runs: int | None) -> dict[str, Any]:
    return {"id": ident, "user_id": f"user-{ident}", "bucket": bucket,
            "payload": {"every": every, "runs": runs}}


def recurring_jobs(count: int, due: datetime, every: float, runs: int | None,
                   buckets: tuple[str, ...] = tuple(b.name for b in BUCKETS)) -> list[Job]:
    """``count`` recurring jobs spread round-robin over ``buckets``, all due at ``due``."""
    run = uuid.uuid4().hex[:6]
    jobs = []
    for i in range(count):
        msg = recurring_message(f"{run}-{i}", buckets[i % len(buckets)], every, runs)
        jobs.append(Job(job_key=msg["id"], task=RECURRING, bucket=msg["bucket"],
                        args=json.dumps({"args": [msg], "kwargs": {}}), due_at=due))
    return jobs


def worker_env(store_url: str, **extra: str) -> dict[str, str]:
    """Environment for workers and schedulers of a scheduler test."""
    return {"RECUR_DATABASE_URL": store_url, "RECUR_WORK_SCALE": "0",
            "RECUR_SCHEDULER_INTERVAL": "0.1", **extra}


class RunLog:
    """Counts the completions of messages logged since it was created."""

    def __init__(self) -> None:
        self.client, self.cfg = get_redis(), settings()
        self.after = completions.last_id(self.client, self.cfg)
        self.runs: Counter[str] = Counter()
        self.entries: list[completions.Completion] = []

    def poll(self) -> Counter[str]:
        while batch := completions.read_since(self.client, self.cfg, self.after):
            for c in batch:
                self.runs[c.message_id] += 1
                self.entries.append(c)
            self.after = batch[-1].stream_id
        return self.runs


def rows_left(store: DueStore, limit: int = 5) -> list[Any]:
    """A few remaining rows, to show in a failure message."""
    with store.engine.connect() as conn:
        return list(conn.execute(select(due_jobs).limit(limit)))


def wait_until_empty(store: DueStore, timeout: float) -> None:
    """Wait until every job's row is gone; on timeout, show what is left."""
    try:
        wait_for(lambda: all(b.scheduled == 0 and b.dispatched == 0
                             for b in store.stats(datetime.now(UTC)).values()),
                 timeout, "every job's row removed")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}: {store.stats(datetime.now(UTC))} e.g. "
                             f"{rows_left(store)}") from exc
