"""``recur demo``: the main job end to end on the local services.

Starts one worker per bucket, publishes messages spread over the buckets,
waits until each has been processed and prints per-bucket counts and times.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path

import click

from config.buckets import BUCKETS
from config.settings import settings
from tasks import completions
from tasks.app import app
from tasks.process import process_message
from tasks.processes import Child, recur_argv, spawn, wait_for, wait_for_worker
from tasks.redis_conn import get_redis

#: Share of the population in each bucket: most work is short.
MIX = {"short": 0.7, "medium": 0.25, "long": 0.05}


def demo_messages(count: int, run: str) -> list[dict[str, object]]:
    """``count`` messages spread over the buckets by MIX, over 50 users."""
    names = [b.name for b in BUCKETS]
    cut, acc = [], 0.0
    for name in names:
        acc += MIX.get(name, 0.0)
        cut.append(acc)
    out: list[dict[str, object]] = []
    for i in range(count):
        share = (i * 0.6180339887) % 1.0  # low-discrepancy spread, deterministic
        bucket = next((n for n, c in zip(names, cut, strict=True) if share < c), names[-1])
        out.append({"id": f"{run}-{i}", "user_id": f"user-{i % 50}", "bucket": bucket,
                    "payload": {"n": i}})
    return out


def start_workers(work_scale: float, log_dir: Path) -> list[Child]:
    """One ``recur worker <bucket>`` per bucket, each answering ping before we go on."""
    env = {**os.environ, "RECUR_WORK_SCALE": str(work_scale)}
    host = socket.gethostname()
    children = []
    for bucket in BUCKETS:
        child = spawn(f"worker-{bucket.name}", recur_argv("worker", bucket.name), log_dir, env)
        children.append(child)
        wait_for_worker(app, child, f"{bucket.name}@{host}")
        click.echo(f"  worker {bucket.name}@{host} up (pid {child.pid})")
    return children


def run_demo(messages: int, work_scale: float, timeout: float) -> int:
    """Run the demo; return the exit code (0 when nothing was lost)."""
    cfg, client = settings(), get_redis()
    run = uuid.uuid4().hex[:8]
    log_dir = Path(tempfile.mkdtemp(prefix=f"recur-demo-{run}-"))
    click.echo(f"recur demo {run}: {messages} messages, work scale {work_scale}, logs in {log_dir}")
    children = start_workers(work_scale, log_dir)
    try:
        since = completions.last_id(client, cfg)
        batch = demo_messages(messages, run)
        t0 = time.monotonic()
        for message in batch:
            process_message.delay(message)
        click.echo(f"  published {len(batch)} in {time.monotonic() - t0:.2f}s: "
                   f"{dict(Counter(str(m['bucket']) for m in batch))}")
        seen: dict[str, completions.Completion] = {}

        def all_done() -> bool:
            for c in completions.read_since(client, cfg, since_id(seen, since)):
                seen[c.message_id] = c
            return len(seen) >= len(batch)

        wait_for(all_done, timeout, f"{len(batch)} messages to be processed", interval=0.25)
        report(batch, seen, time.monotonic() - t0)
        return 0
    except TimeoutError as exc:
        click.echo(f"  {exc}: processed {len(seen)}, lost {len(batch) - len(seen)}")
        return 1
    finally:
        for child in children:
            child.stop()


def since_id(seen: dict[str, completions.Completion], start: str) -> str:
    """Newest stream id seen so far, so each poll reads only new entries."""
    return max((c.stream_id for c in seen.values()), key=_id_key, default=start)


def _id_key(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


def report(batch: list[dict[str, object]], seen: dict[str, completions.Completion],
           wall: float) -> None:
    """Print per-bucket counts, workers and times."""
    by_bucket: dict[str, list[completions.Completion]] = defaultdict(list)
    for c in seen.values():
        by_bucket[c.bucket].append(c)
    click.echo(f"  done in {wall:.2f}s")
    click.echo(f"  {'bucket':<8}{'count':>7}{'workers':>22}{'mean run s':>12}{'last done s':>13}")
    first = min(c.started for c in seen.values())
    for bucket in BUCKETS:
        runs = by_bucket.get(bucket.name, [])
        if not runs:
            continue
        workers = ",".join(sorted({c.worker for c in runs}))
        mean = sum(c.finished - c.started for c in runs) / len(runs)
        last = max(c.finished for c in runs) - first
        click.echo(f"  {bucket.name:<8}{len(runs):>7}{workers:>22}{mean:>12.3f}{last:>13.2f}")
    wrong = [c for c in seen.values() if c.worker.split("@")[0] != c.bucket]
    click.echo(f"  processed {len(seen)}/{len(batch)}, lost {len(batch) - len(seen)}, "
               f"run by another bucket's worker {len(wrong)}")
