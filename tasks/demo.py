"""``recur demo``: the main job end to end on the local services.

seed (PySpark, into the due-jobs store) → schedule (``recur scheduler`` drains
what is due into the bucket queues) → process (one ``recur worker`` per bucket)
→ reschedule (each message puts itself back in the store) → … for ``cycles``
runs of every message; then prints per bucket what ran and how much was lost.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import click

from config.buckets import BUCKETS
from config.settings import settings
from scheduler.engine import make_engine
from scheduler.migrate import upgrade
from scheduler.store import DueStore
from tasks import completions
from tasks.app import app
from tasks.processes import Child, recur_argv, spawn, wait_for, wait_for_worker
from tasks.redis_conn import get_redis


def start_workers(env: dict[str, str], log_dir: Path) -> list[Child]:
    """One ``recur worker <bucket>`` per bucket, each answering ping before we go on."""
    host = socket.gethostname()
    children = []
    for bucket in BUCKETS:
        child = spawn(f"worker-{bucket.name}", recur_argv("worker", bucket.name), log_dir, env)
        children.append(child)
        wait_for_worker(app, child, f"{bucket.name}@{host}")
        click.echo(f"  worker {bucket.name}@{host} up (pid {child.pid})")
    return children


def seed_with_spark(messages: int, seed: int, cycles: int, every: float, log_dir: Path) -> None:
    """Run the Spark seed job; its summary lines are echoed."""
    argv = recur_argv("seed", "--generate", str(messages), "--seed", str(seed), "--spread", "0",
                      "--every", f"{every:g}s", "--runs", str(cycles),
                      "--rejects", str(log_dir / "seed-rejects"))
    result = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    for line in result.stdout.splitlines():
        click.echo(f"  spark: {line}")
    if result.returncode != 0:
        raise click.ClickException(f"seed job failed ({result.returncode}):\n"
                                   f"{result.stderr[-3000:]}")


def stored_rows(url: str) -> int:
    """Rows in the due-jobs store, scheduled or dispatched."""
    store = DueStore.open(url)
    try:
        stats = store.stats(datetime.now(UTC) + timedelta(days=1))
        return sum(b.scheduled + b.dispatched for b in stats.values())
    finally:
        store.close()


def run_demo(messages: int, cycles: int, every: float, work_scale: float,
             timeout: float) -> int:
    """Run the demo; return the exit code (0 when every message ran every cycle)."""
    cfg, client = settings(), get_redis()
    seed = random.randrange(1, 2**31)
    log_dir = Path(tempfile.mkdtemp(prefix=f"recur-demo-{seed}-"))
    click.echo(f"recur demo: {messages} messages x {cycles} cycles, every {every:g}s, "
               f"store {cfg.database_url}, logs in {log_dir}")
    engine = make_engine(cfg.database_url)
    try:
        click.echo(f"  due-jobs schema at revision {upgrade(engine)}")
    finally:
        engine.dispose()
    before = stored_rows(cfg.database_url)
    env = {**os.environ, "RECUR_WORK_SCALE": str(work_scale)}
    children: list[Child] = []
    runs: Counter[str] = Counter()
    buckets: dict[str, str] = {}
    since = completions.last_id(client, cfg)
    t0 = time.monotonic()
    try:
        children += start_workers(env, log_dir)
        seed_with_spark(messages, seed, cycles, every, log_dir)
        children.append(spawn("scheduler", recur_argv("scheduler"), log_dir, env))
        click.echo(f"  scheduler up (pid {children[-1].pid})")
        prefix = f"gen-{seed}-"

        def all_cycles() -> bool:
            nonlocal since
            for c in completions.read_since(client, cfg, since):
                since = c.stream_id
                if c.message_id.startswith(prefix):
                    runs[c.message_id] += 1
                    buckets[c.message_id] = c.bucket
            return len(runs) == messages and min(runs.values()) >= cycles

        wait_for(all_cycles, timeout, f"{messages} messages x {cycles} cycles", interval=0.25)
        wait_for(lambda: stored_rows(cfg.database_url) == before, 30,
                 "finished messages' rows to be removed", interval=0.5)
        return report(messages, buckets, runs, cycles, time.monotonic() - t0)
    except TimeoutError as exc:
        click.echo(f"  {exc}")
        report(messages, buckets, runs, cycles, time.monotonic() - t0)
        return 1
    finally:
        for child in reversed(children):
            child.stop()


def report(messages: int, buckets: dict[str, str], runs: Counter[str], cycles: int,
           wall: float) -> int:
    """Per bucket: messages, runs, cycles per message (min/max); 0 when none was lost."""
    click.echo(f"  done in {wall:.1f}s")
    click.echo(f"  {'bucket':<8}{'messages':>9}{'runs':>7}{'min cycles':>12}{'max cycles':>12}")
    for bucket in BUCKETS:
        counts = [runs[k] for k, b in buckets.items() if b == bucket.name]
        if counts:
            click.echo(f"  {bucket.name:<8}{len(counts):>9}{sum(counts):>7}{min(counts):>12}"
                       f"{max(counts):>12}")
    complete = sum(1 for n in runs.values() if n >= cycles)
    lost = messages - complete
    extra = sum(max(0, n - cycles) for n in runs.values())
    click.echo(f"  seeded {messages}, every one run {cycles} times: {complete}; "
               f"lost {lost}, extra runs {extra}")
    return 0 if lost == 0 else 1
