"""``recur demo`` with recurring messages: seed → schedule → process → reschedule → …

Seeds the due-jobs store (RECUR_DATABASE_URL, migrated first) with messages
that recur every second for ``cycles`` runs, starts one worker per bucket and
a scheduler, and waits until every message has run every cycle. The summary
shows cycles per message per bucket and how many were lost (must be 0).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import click

from config.buckets import BUCKETS
from config.settings import settings
from scheduler.engine import make_engine
from scheduler.migrate import upgrade
from scheduler.store import DueStore, Job
from tasks import completions
from tasks.demo import demo_messages, start_workers
from tasks.processes import Child, recur_argv, spawn, wait_for
from tasks.redis_conn import get_redis

EVERY_SECONDS = 1.0


def seed(store: DueStore, count: int, cycles: int, run: str) -> dict[str, str]:
    """Write ``count`` recurring messages, due now; returns message id → bucket."""
    now = datetime.now(UTC)
    jobs = []
    for message in demo_messages(count, run):
        message["payload"] = {"every": EVERY_SECONDS, "runs": cycles}
        jobs.append(Job(job_key=str(message["id"]), task="tasks.recurring_message",
                        bucket=str(message["bucket"]),
                        args=json.dumps({"args": [message], "kwargs": {}}), due_at=now))
    store.schedule(jobs, now)
    return {j.job_key: j.bucket for j in jobs}


def run_recurring_demo(messages: int, cycles: int, work_scale: float, timeout: float) -> int:
    """Run the demo; return the exit code (0 when every message ran every cycle)."""
    cfg, client = settings(), get_redis()
    run = uuid.uuid4().hex[:8]
    log_dir = Path(tempfile.mkdtemp(prefix=f"recur-demo-{run}-"))
    click.echo(f"recur demo {run}: {messages} messages x {cycles} cycles (every "
               f"{EVERY_SECONDS:.0f}s), store {cfg.database_url}, logs in {log_dir}")
    engine = make_engine(cfg.database_url)
    click.echo(f"  due-jobs schema at revision {upgrade(engine)}")
    engine.dispose()
    store = DueStore.open(cfg.database_url)
    children: list[Child] = []
    runs: Counter[str] = Counter()
    try:
        children += start_workers(work_scale, log_dir)
        since = completions.last_id(client, cfg)
        buckets = seed(store, messages, cycles, run)
        click.echo(f"  seeded {len(buckets)} rows: {dict(Counter(buckets.values()))}")
        t0 = time.monotonic()
        children.append(spawn("scheduler", recur_argv("scheduler"), log_dir,
                              {**os.environ, "RECUR_WORK_SCALE": str(work_scale)}))
        click.echo(f"  scheduler up (pid {children[-1].pid})")

        def all_cycles() -> bool:
            nonlocal since
            for c in completions.read_since(client, cfg, since):
                since = c.stream_id
                if c.message_id in buckets:
                    runs[c.message_id] += 1
            return all(runs[k] >= cycles for k in buckets)

        wait_for(all_cycles, timeout, f"{messages} messages x {cycles} cycles", interval=0.25)
        wait_for(lambda: not store.stats(datetime.now(UTC) + timedelta(days=1)), 30,
                 "finished messages' rows to be removed")
        report(buckets, runs, cycles, time.monotonic() - t0)
        return 0
    except TimeoutError as exc:
        click.echo(f"  {exc}")
        report(buckets, runs, cycles, time.monotonic() - t0)
        return 1
    finally:
        for child in reversed(children):
            child.stop()
        store.close()


def report(buckets: dict[str, str], runs: Counter[str], cycles: int, wall: float) -> None:
    """Per bucket: messages, runs, cycles per message (min/max), lost."""
    click.echo(f"  done in {wall:.1f}s")
    click.echo(f"  {'bucket':<8}{'messages':>9}{'runs':>7}{'min cycles':>12}{'max cycles':>12}"
               f"{'lost':>6}")
    for bucket in BUCKETS:
        keys = [k for k, b in buckets.items() if b == bucket.name]
        if not keys:
            continue
        counts = [runs[k] for k in keys]
        lost = sum(1 for n in counts if n < cycles)
        click.echo(f"  {bucket.name:<8}{len(keys):>9}{sum(counts):>7}{min(counts):>12}"
                   f"{max(counts):>12}{lost:>6}")
    lost = sum(1 for k in buckets if runs[k] < cycles)
    extra = sum(max(0, runs[k] - cycles) for k in buckets)
    click.echo(f"  cycles per message: {cycles} expected; lost {lost}, extra runs {extra}")
