"""The rig of bench.bench_rate_limit: the jobs it sends, the workers it starts, the CPU
each component used, and the figures read from the recorded starts."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.proc_stats import cpu_seconds, named, tree

#: The limit of every key (tests/support/rate_tasks.py): 5 starts a second, burst 1.
RATE, BURST = 5.0, 1
#: How many times its share the hot key is sent (the issue: "one key at 100x its limit").
HOT_FACTOR = 100
#: The shared services' process names, for the CPU they used during a mode.
SERVICES = {"redis": ("redis-server",), "postgres": ("postgres",), "rabbitmq": ("beam.smp",)}


def messages(keys: int, jobs: int, hot: bool) -> list[dict[str, Any]]:
    """Job i of every key, then job i + 1 (a key's jobs ``keys`` apart in the queue);
    with ``hot``, HOT_FACTOR x ``jobs`` jobs of the key "hot" spread evenly among them."""
    others = [job(f"k{k}", f"k{k}-{i}") for i in range(jobs) for k in range(keys)]
    if not hot:
        return others
    n_hot, out = HOT_FACTOR * jobs, []
    for n, msg in enumerate(others):
        out.append(msg)
        while len(out) - n - 1 < (n + 1) * n_hot // len(others):
            out.append(job("hot", f"hot-{len(out) - n - 1}"))
    return out


def job(key: str, ident: str) -> dict[str, Any]:
    return {"id": ident, "user_id": key, "bucket": "short", "payload": {"ms": 0}}


@dataclass
class CpuMeter:
    """CPU seconds used by the workers, the scheduler, each service and this process
    between :meth:`start` and :meth:`stop`."""

    workers: list[int]
    scheduler: int
    used: dict[str, float] | None = None

    def sample(self) -> dict[str, float]:
        worker_pids = [p for root in self.workers for p in tree(root)]
        pool = [p for p in worker_pids if p not in self.workers]
        out = {"workers": cpu_seconds(worker_pids),
               # of which the pool processes that run the jobs (the rest: the consumers)
               "worker_pool": cpu_seconds(pool),
               # their voluntary context switches (blocking waits: a Redis round trip...)
               "pool_switches": float(sum(switches(p) for p in pool)),
               "scheduler": cpu_seconds(tree(self.scheduler)),
               "bench": cpu_seconds([os.getpid()])}
        out.update({name: cpu_seconds(named(*comms)) for name, comms in SERVICES.items()})
        return out

    @contextmanager
    def measuring(self) -> Iterator[None]:
        before = self.sample()
        try:
            yield
        finally:
            after = self.sample()  # a process that exited is not counted (workers run on)
            self.used = {k: round(after[k] - before[k], 2) for k in before}


def switches(pid: int) -> int:
    """Voluntary context switches of ``pid`` so far (0 once it exited)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return sum(int(line.split()[1]) for line in text.splitlines()
               if line.startswith("voluntary_ctxt_switches"))


def window_count(starts: list[dict[str, Any]], rate: float = RATE,
                 burst: int = BURST) -> tuple[int, int]:
    """Keys over rate + burst in some 1-second window, and the worst excess."""
    from tests.support.rate_tasks import window_violations

    over = window_violations(starts, rate, burst)
    return len(over), max(over.values(), default=0)


def figures(starts: list[dict[str, Any]], sent: list[dict[str, Any]], busy: int,
            allowed: float, window: float | None = None) -> dict[str, Any]:
    """What one mode did, from the recorded starts (key, id, time). ``window``: the
    mode was watched that many seconds from its first start (its rate is over them)."""
    others_sent = {m["id"] for m in sent if m["user_id"] != "hot"}
    first = min((s["t"] for s in starts), default=float("nan"))
    if window is not None:
        starts = [s for s in starts if s["t"] <= first + window]
    others = [s for s in starts if s["key"] != "hot"]
    last = max((s["t"] for s in others), default=float("nan"))
    span = last - first if window is None else min(window, last - first)
    over, worst = window_count(starts)
    inverted = order_inversions(starts, sent)
    return {"jobs": len(sent), "others_sent": len(others_sent), "started": len(starts),
            "others_not_started": len(others_sent - {s["id"] for s in others}),
            "duplicate_starts": len(starts) - len({s["id"] for s in starts}),
            "hot_started": len(starts) - len(others),
            "keys_over_limit": over, "worst_excess_per_window": worst,
            "order_inversions": sum(inverted.values()),
            "hot_order_inversions": inverted.get("hot", 0),
            "keys_out_of_order": sum(1 for n in inverted.values() if n),
            "span_s": round(span, 2),
            "others_per_s": round(len(others) / span, 1) if span > 0 else None,
            "allowed_per_s": allowed,
            "busy_returns": busy,
            "busy_returns_per_job": round(busy / len(sent), 4) if sent else 0.0}


def order_inversions(starts: list[dict[str, Any]], sent: list[dict[str, Any]]
                     ) -> dict[str, int]:
    """Per key, pairs of its jobs that started in the opposite order of publication
    (a job's first start counts; the issue: a job keeps its place among its key's)."""
    rank = {m["id"]: i for i, m in enumerate(sent)}
    first: dict[str, float] = {}
    for s in sorted(starts, key=lambda s: s["t"]):
        first.setdefault(s["id"], s["t"])
    by_key: dict[str, list[int]] = {}
    for s in sorted(starts, key=lambda s: s["t"]):
        if first.get(s["id"]) == s["t"] and s["id"] in rank:
            first.pop(s["id"])
            by_key.setdefault(s["key"], []).append(rank[s["id"]])
    return {key: inversions(ranks) for key, ranks in by_key.items()}


def inversions(ranks: list[int]) -> int:
    """Pairs i < j with ranks[i] > ranks[j] (merge sort count: a hot key has thousands)."""
    if len(ranks) < 2:
        return 0
    mid = len(ranks) // 2
    left, right = sorted(ranks[:mid]), sorted(ranks[mid:])
    count, j = inversions(ranks[:mid]) + inversions(ranks[mid:]), 0
    for value in left:
        while j < len(right) and right[j] < value:
            j += 1
        count += j
    return count


def wait_until(done: Any, timeout: float, poll: float = 0.25) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(poll)
    return bool(done())


def log_dir(mode: str) -> Path:
    from tempfile import mkdtemp

    return Path(mkdtemp(prefix=f"bench-rate-{mode}-"))
