"""``recur demo``: the main job end to end on the local services.

seed (PySpark, into the due-jobs store) → schedule (``recur scheduler`` drains
what is due into the bucket queues) → process (one ``recur worker`` per bucket)
→ reschedule (each message puts itself back in the store) → … for ``cycles``
runs of every message; then prints per bucket what ran and how much was lost.

It runs in its own vhost, key prefix and SQLite database (tasks/cli/demo/env.py) and
removes them at the end; the logs are kept only when the demo failed.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import click
from celery import Celery

from config.buckets_in_use import bucket_table
from config.settings import Settings, settings
from routing.redis_client import get_redis
from scheduler.store import DueStore
from scheduler.store.connection import make_engine
from scheduler.store.migrate import upgrade
from tasks import completions
from tasks.app import create_app
from tasks.cli.demo.children import Child, recur_argv, spawn, wait_for, wait_for_worker
from tasks.cli.demo.env import new_demo_env


def start_workers(app: Celery, env: dict[str, str], log_dir: Path,
                  children: list[Child]) -> None:
    """One ``recur worker <bucket>`` per bucket, each answering ping before we go on."""
    host = socket.gethostname()
    for bucket in bucket_table().buckets:
        child = spawn(f"worker-{bucket.name}", recur_argv("worker", bucket.name), log_dir, env)
        children.append(child)
        wait_for_worker(app, child, f"{bucket.name}@{host}")
        click.echo(f"  worker {bucket.name}@{host} up (pid {child.pid})")


def seed_with_spark(messages: int, seed: int, cycles: int, every: float, log_dir: Path,
                    env: dict[str, str]) -> None:
    """Run the Spark seed job; its summary lines are echoed."""
    argv = recur_argv("seed", "--generate", str(messages), "--seed", str(seed), "--spread", "0",
                      "--every", f"{every:g}s", "--runs", str(cycles),
                      "--rejects", str(log_dir / "seed-rejects"))
    result = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
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
    seed = random.randrange(1, 2**31)
    demo = new_demo_env(str(seed), settings())
    env = {**os.environ, **demo.environment, "RECUR_WORK_SCALE": str(work_scale)}
    cfg, log_dir = demo.settings(env), demo.workdir
    click.echo(f"recur demo: {messages} messages x {cycles} cycles, every {every:g}s, "
               f"vhost {demo.vhost}, key prefix {cfg.key_prefix}, store {cfg.database_url}")
    demo.create_vhost()
    code = 1
    try:
        code = run_in(demo_app(cfg), cfg, env, log_dir, seed, messages, cycles, every, timeout)
    finally:
        demo.remove(keep_logs=code != 0)
        click.echo("  removed the demo's vhost, keys and store"
                   + (f"; logs kept in {log_dir}" if code else ""))
    return code


def demo_app(cfg: Settings) -> Celery:
    """A Celery app on the demo's vhost, to ping the demo's workers."""
    return create_app(cfg)


def run_in(app: Celery, cfg: Settings, env: dict[str, str], log_dir: Path, seed: int,
           messages: int, cycles: int, every: float, timeout: float) -> int:
    """The demo proper, on the resources ``cfg`` names."""
    client = get_redis()
    engine = make_engine(cfg.database_url)
    try:
        click.echo(f"  due-jobs schema at revision {upgrade(engine)}")
    finally:
        engine.dispose()
    before = stored_rows(cfg.database_url)
    children: list[Child] = []
    runs: Counter[str] = Counter()
    buckets: dict[str, str] = {}
    since = completions.last_id(client, cfg)
    t0 = time.monotonic()
    try:
        start_workers(app, env, log_dir, children)
        seed_with_spark(messages, seed, cycles, every, log_dir, env)
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
    for bucket in bucket_table().buckets:
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
