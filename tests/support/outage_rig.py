"""The outage scenario: private PostgreSQL, Redis and RabbitMQ, workers for every
bucket, two schedulers, and a population of a user's own recurring task.

Used by tests/faults/test_outages.py (small) and bench/bench_outages.py (bigger):
both run it with recur's default settings; only the service URLs are set.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kombu import Connection

from config.buckets_in_use import BUCKETS
from config.settings import load_settings
from routing.broker import queue_depth
from routing.queues import declare_topology
from scheduler.store import DueStore, Job
from scheduler.store.connection import make_engine
from scheduler.store.migrate import upgrade
from tasks.cli.worker import celery_executable
from tests.support.outage_tasks import INCLUDE, RUNS_FILE, TASK, outage_message
from tests.support.private_postgres import PrivatePostgres, private_postgres
from tests.support.private_services import (
    PrivateRabbit,
    PrivateRedis,
    private_rabbit,
    private_redis,
)
from tests.support.processes import Child, recur_argv, spawn, wait_for
from tests.support.services import ROOT


@dataclass(frozen=True)
class Fault:
    """One fault: what, when it started and when the service was back."""

    name: str
    started: float
    ended: float


@dataclass(frozen=True)
class Run:
    message_id: str
    run: int
    at: float


@dataclass
class OutageRig:
    """Every process of the scenario, and what it recorded."""

    pg: PrivatePostgres
    redis: PrivateRedis
    rabbit: PrivateRabbit
    root: Path
    workers: dict[str, Child] = field(default_factory=dict)
    schedulers: list[Child] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    children: list[Child] = field(default_factory=list)
    key_prefix: str = field(default_factory=lambda: f"recur-outage-{uuid.uuid4().hex[:8]}")

    @property
    def runs_file(self) -> Path:
        return self.root / "runs.txt"

    def env(self) -> dict[str, str]:
        """Default settings; only where the services are (and the test's run log)."""
        keep = {k: v for k, v in os.environ.items() if not k.startswith("RECUR_")}
        return {**keep, "RECUR_DATABASE_URL": self.pg.url, "RECUR_BROKER_URL": self.rabbit.url,
                "RECUR_REDIS_URL": self.redis.url,
                "RECUR_KEY_PREFIX": self.key_prefix,
                RUNS_FILE: str(self.runs_file)}

    def start_worker(self, bucket: str, concurrency: int = 3) -> Child:
        name = f"{bucket}-{uuid.uuid4().hex[:6]}"
        child = spawn(name, [celery_executable(), "-A", "tasks", "worker", "-Q", bucket,
                             "-n", f"{name}@localhost", "-c", str(concurrency), "-l", "INFO",
                             "--without-mingle", "--without-gossip", *INCLUDE],
                      self.root / "logs", self.env(), cwd=ROOT)
        self.children.append(child)
        self.workers[bucket] = child
        wait_for(lambda: " ready." in child.log() or child.proc.poll() is not None, 90,
                 f"worker {name} ready")
        if child.proc.poll() is not None:
            raise RuntimeError(f"worker {name} exited:\n{child.log()[-3000:]}")
        return child

    def start_scheduler(self) -> Child:
        child = spawn(f"scheduler-{len(self.schedulers)}", recur_argv("scheduler"),
                      self.root / "logs", self.env(), cwd=ROOT)
        self.children.append(child)
        self.schedulers.append(child)
        return child

    def populate(self, count: int, every: float, runs: int) -> list[str]:
        """``count`` recurring messages over every bucket, all due now; their ids."""
        now = datetime.now(UTC)
        tag = uuid.uuid4().hex[:6]
        messages = [outage_message(f"{tag}-{i}", BUCKETS[i % len(BUCKETS)].name, every, runs)
                    for i in range(count)]
        store = DueStore.open(self.pg.url)
        try:
            store.schedule([Job(m["id"], TASK, m["bucket"],
                                json.dumps({"args": [m], "kwargs": {}}), now)
                            for m in messages], now)
        finally:
            store.close()
        return [m["id"] for m in messages]

    def runs(self) -> list[Run]:
        if not self.runs_file.exists():
            return []
        found = []
        for line in self.runs_file.read_text().splitlines():
            parts = line.split()
            if len(parts) == 4:
                found.append(Run(parts[0], int(parts[1]), float(parts[2])))
        return found

    def wait_for_runs(self, count: int, timeout: float) -> None:
        wait_for(lambda: len(self.runs()) >= count, timeout, f"{count} runs", interval=0.5)

    def outage(self, name: str, stop: Any, start: Any, seconds: float) -> None:
        """Stop a service for ``seconds``, start it again, and record the fault."""
        began = time.time()
        stop()
        time.sleep(seconds)  # the outage itself: nothing to wait for
        start()
        self.faults.append(Fault(name, began, time.time()))

    def kill(self, name: str, child: Child) -> None:
        began = time.time()
        child.kill9()
        self.faults.append(Fault(name, began, began))

    def dead_letters(self) -> dict[str, int]:
        with Connection(self.rabbit.url) as conn:
            return {b.dead_queue: queue_depth(conn, b.dead_queue) for b in BUCKETS}

    def rows_left(self) -> int:
        store = DueStore.open(self.pg.url)
        try:
            return sum(s.scheduled + s.dispatched for s in store.stats(datetime.now(UTC)).values())
        finally:
            store.close()


@contextmanager
def outage_rig(root: Path) -> Iterator[OutageRig]:
    """The private services, migrated and declared; every child stopped at the end."""
    with ExitStack() as stack:
        pg = stack.enter_context(private_postgres())
        redis = stack.enter_context(private_redis())
        rabbit = stack.enter_context(private_rabbit())
        engine = make_engine(pg.url)
        upgrade(engine)
        engine.dispose()
        rig = OutageRig(pg, redis, rabbit, root)
        with Connection(rabbit.url) as conn:
            declare_topology(conn, load_settings({}))
        try:
            yield rig
        finally:
            for child in rig.children:
                child.stop(timeout=15)


@dataclass(frozen=True)
class Figures:
    """What a scenario run measured."""

    messages: int
    runs_each: int
    runs: int
    duplicates: int
    missing: int
    dead_letters: dict[str, int]
    wall_seconds: float
    runs_per_second: float
    last_fault_to_last_run: float
    longest_outage: float
    #: Per outage: seconds from the service being back to the first run completed after.
    resumed_after: dict[str, float]
    faults: list[Fault]

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "faults": [f.__dict__ for f in self.faults]}


def figures(rig: OutageRig, ids: list[str], runs_each: int, started: float) -> Figures:
    """Count runs, duplicates and what is missing; time from the last fault."""
    runs = rig.runs()
    seen = Counter((r.message_id, r.run) for r in runs)
    wanted = {(i, n) for i in ids for n in range(1, runs_each + 1)}
    last = max(r.at for r in runs) if runs else started
    last_fault = max((f.started for f in rig.faults), default=started)
    return Figures(
        messages=len(ids), runs_each=runs_each, runs=len(runs),
        duplicates=sum(n - 1 for n in seen.values() if n > 1),
        missing=len(wanted - seen.keys()), dead_letters=rig.dead_letters(),
        wall_seconds=round(last - started, 2),
        runs_per_second=round(len(runs) / max(last - started, 1e-9), 1),
        last_fault_to_last_run=round(last - last_fault, 2),
        longest_outage=round(max((f.ended - f.started for f in rig.faults), default=0.0), 2),
        resumed_after={f.name: round(min((r.at for r in runs if r.at >= f.ended),
                                         default=last) - f.ended, 2)
                       for f in rig.faults if f.ended > f.started},
        faults=list(rig.faults))
