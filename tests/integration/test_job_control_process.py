"""The pull-forward floor and job control with a real scheduler and real workers.

One stack per store (SQLite, PostgreSQL): a ``recur scheduler`` with the
default pull-forward settings and three workers, one per bucket, each bucket
holding one scenario so they run side by side in the same minute:

- short, idle: one message recurring every 10 s for 30 s (the issue's every=60
  for 3 minutes, scaled: the floor rule is relative to the interval, the
  default fraction and 1 s minimum are what run, and 10 s is still far above
  the scheduler's 0.1 s pass, so the same runs are expected: at 0, 5, 15, 20,
  30 s); an opted-out ``countdown=30`` (at 30 s, not before) and a plain
  ``countdown=30`` (never ran: no floor, pulled forward at once);
- long: 2,000 recurring jobs due over the next hour, seeded (no floor);
- medium (each run 2 s): cancel of a scheduled job, of a running recurring
  job, of a user's jobs; reschedule; pause and resume with work waiting.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner

from scheduler import jobs as api
from scheduler.store import DueStore, Job
from scheduler.store.control import JobControl
from tasks.cli import cli
from tasks.process import process_message
from tests.support.processes import wait_for
from tests.support.scheduler_support import RunLog, recurring_message, worker_env

EVERY = 10.0
WINDOW = 30.0


def now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Stack:
    store: DueStore
    ctl: JobControl
    log: RunLog
    scheduler: Any

    def starts(self, key: str) -> list[float]:
        self.log.poll()
        return sorted(c.started for c in self.log.entries if c.message_id == key)

    def state(self, key: str) -> str | None:
        row = self.ctl.get(key)
        return None if row is None else row.state


@pytest.fixture
def stack(store_url: str, use_store: Callable[[str], None], broker: Any, start_worker: Any,
          start_scheduler: Any) -> Iterator[Stack]:
    use_store(store_url)
    env = worker_env(store_url)
    start_worker("short", env=env)
    start_worker("medium", env={**env, "RECUR_WORK_SCALE": "4"})  # a medium run takes 2 s
    start_worker("long", concurrency=4, env=env)
    store = DueStore.open(store_url)
    log = RunLog()
    scheduler = start_scheduler(env)
    yield Stack(store, JobControl(store), log, scheduler)
    store.close()


def seed_backlog(store: DueStore, count: int) -> dict[str, datetime]:
    """``count`` long-bucket jobs recurring hourly, due over the next hour, loaded with
    no floor (as the seed loads them); their natural due times."""
    start, jobs = now(), []
    for i in range(count):
        msg = recurring_message(f"backlog-{i}", "long", 3600, None)
        due = start + timedelta(seconds=60 + 3500 * i / count)
        jobs.append(Job(msg["id"], "tasks.process_message", "long",
                        json.dumps({"args": [msg]}), due))
    store.schedule(jobs, start)
    return {j.job_key: j.due_at for j in jobs}


def medium(ident: str, user: str = "ops", every: float | None = None) -> dict[str, Any]:
    payload = None if every is None else {"every": every, "runs": None}
    return {"id": ident, "user_id": user, "bucket": "medium", "payload": payload}


def control_scenarios(s: Stack) -> None:
    """Cancel, reschedule, pause and resume in the medium bucket."""
    # A scheduled job, cancelled: never runs.
    process_message.apply_async((medium("c-sched"),), countdown=4, job_key="c-sched",
                                not_before=True)
    assert api.cancel(s.ctl, "c-sched").state == "scheduled"
    # A recurring job cancelled while its run is in flight: that run ends, it never comes back.
    process_message.apply_async((medium("c-run", every=3),), job_key="c-run")
    # Dispatched *again*: its first run is rescheduled (runs counts it), so the 2 s run
    # in flight is the second. The completion log alone is written before the
    # reschedule, so "logged and dispatched" can still be the first dispatch.
    wait_for(lambda: (row := s.ctl.get("c-run")) is not None and row.runs >= 1
             and row.state == "dispatched", 30, "c-run dispatched again after its first run")
    assert api.cancel(s.ctl, "c-run").state == "dispatched"
    cancelled_at = time.time()
    # A user's jobs, while they recur; another user's job goes on.
    for i in range(3):
        process_message.apply_async((medium(f"victim-{i}", "victim", every=3),),
                                    job_key=f"victim-{i}")
    process_message.apply_async((medium("keeper", "keeper", every=3),), job_key="keeper")
    wait_for(lambda: all(s.starts(f"victim-{i}") for i in range(3)), 40, "victims running")
    assert sum(api.cancel_user(s.ctl, "victim").values()) == 3
    user_cancelled_at = time.time()
    # Reschedule: due in an hour (not before), moved to 3 s from now.
    process_message.apply_async((medium("moved"),), countdown=3600, not_before=True)
    moved_at = now()
    api.reschedule(s.ctl, "moved", moved_at + timedelta(seconds=3))
    wait_for(lambda: bool(s.starts("moved")), 40, "the rescheduled job to run")
    assert s.starts("moved")[0] >= moved_at.timestamp() + 3
    # Pause with work waiting: nothing of the bucket is dispatched until resumed.
    assert api.pause(s.ctl, "medium")
    wait_for(lambda: "medium: paused" in s.scheduler.log(), 20, "the scheduler to see the pause")
    process_message.apply_async((medium("waiting"),), job_key="waiting")
    status = CliRunner().invoke(cli, ["status"])
    assert "paused buckets: medium" in status.output, status.output
    time.sleep(3)  # a paused bucket: many scheduler passes, and the job must still wait
    assert s.state("waiting") == "scheduled" and not s.starts("waiting")
    assert api.resume(s.ctl, "medium")
    wait_for(lambda: bool(s.starts("waiting")), 40, "the waiting job to run after resume")
    # What was cancelled stayed cancelled.
    time.sleep(max(0.0, cancelled_at + 10 - time.time()))
    assert not s.starts("c-sched")
    assert [t for t in s.starts("c-run") if t > cancelled_at + 0.5] == []
    assert s.state("c-run") is None
    late = [t for i in range(3) for t in s.starts(f"victim-{i}") if t > user_cancelled_at + 0.5]
    assert late == [] and s.ctl.get("victim-0") is None
    assert [t for t in s.starts("keeper") if t > user_cancelled_at + 0.5], "keeper stopped"


def test_floor_backlog_and_job_control(stack: Stack) -> None:
    s = stack
    natural = seed_backlog(s.store, 2000)
    seeded_at = time.time()
    recurring = recurring_message("every", "short", EVERY, None)
    process_message.apply_async((recurring,), job_key="every")
    called = time.time()
    process_message.apply_async(({"id": "opted-out", "user_id": "u", "bucket": "short",
                                  "payload": None},), countdown=30, not_before=True)
    process_message.apply_async(({"id": "plain", "user_id": "u", "bucket": "short",
                                  "payload": None},), countdown=30)

    control_scenarios(s)

    # The backlog: all pulled forward by idle workers, none run twice.
    backlog = list(natural)
    # 10-20 s on a quiet machine, 80 s seen with the 2 cores loaded by other test runs.
    wait_for(lambda: all(s.starts(k) for k in backlog), 300, "the backlog to be pulled forward")
    busy_for = max(s.starts(k)[0] for k in backlog) - seeded_at
    assert all(s.starts(k)[0] < natural[k].timestamp() for k in backlog)  # pulled forward

    first = s.starts("every")[0]
    wait_for(lambda: time.time() > first + WINDOW + 1, WINDOW + 30, "the minute to pass")
    runs = [t for t in s.starts("every") if t <= first + WINDOW]
    gaps = [b - a for a, b in itertools.pairwise(runs)]
    assert 3 <= len(runs) <= 6, runs
    assert min(gaps) >= EVERY / 2 - 0.5, gaps  # never sooner than the floor
    (opted,) = s.starts("opted-out")
    assert opted >= called + 30
    (plain,) = s.starts("plain")
    assert plain < called + 15  # not run yet: no floor, pulled forward by the idle bucket
    twice = [k for k in backlog if len(s.starts(k)) != 1]
    assert twice == []
    for key in backlog[:: 50]:  # each one's next run: not pulled forward before its due time
        row = s.ctl.get(key)
        assert row is not None and row.early_at >= natural[key], (key, row)
    print(f"every={EVERY:.0f}: {len(runs)} runs in {WINDOW:.0f}s, gaps {gaps}; "
          f"backlog of 2000 run within {busy_for:.1f}s")
