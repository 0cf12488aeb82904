"""Polite stops: SIGTERM (warm shutdown), a second signal (cold), SIGQUIT, for workers and
the scheduler. Nothing is lost, and no run happens twice but a stale copy dropped by design.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from routing.broker import queue_depth
from scheduler.store import DueStore, Job, close_stores
from scheduler.wire import encode_call
from tasks.cli.worker import celery_executable
from tests.support import io_tasks, services
from tests.support.processes import spawn, wait_for
from tests.support.scheduler_support import RunLog, recurring_jobs, wait_until_empty, worker_env

pytestmark = pytest.mark.services


def mine(prefix: str) -> list[dict[str, Any]]:
    return [r for r in io_tasks.read_runs() if str(r["id"]).startswith(prefix)]


def io_jobs(prefix: str, count: int, wait_s: float, runs: int) -> list[Job]:
    now = datetime.now(UTC)
    jobs = []
    for i in range(count):
        key = f"{prefix}{i:03d}"
        msg = {
            "id": key,
            "user_id": f"u-{i}",
            "bucket": "io",
            "payload": {"s": wait_s, "every": 0.2, "left": runs},
        }
        jobs.append(
            Job(key, "tests.io_cycle", "io", encode_call([msg], {}, job_key=key, bucket="io"), now)
        )
    return jobs


def in_flight(prefix: str) -> int:
    runs = mine(prefix)
    ended = Counter((r["id"], r["left"]) for r in runs if r["ev"] == "end")
    return sum(1 for r in runs if r["ev"] == "start" and not ended[r["id"], r["left"]])


def test_warm_shutdown_of_io_worker_settles_every_run_in_flight(
    broker: Any, fresh_pg_url: str, start_worker: Any, start_scheduler: Any
) -> None:
    """SIGTERM with dozens of async runs waiting on the loop, some settling: each run in
    flight ends, settles (reschedules its job) and is acknowledged on that worker."""
    prefix = f"gs-{uuid.uuid4().hex[:6]}-"
    jobs, runs_each = io_jobs(prefix, 40, 1.0, 2), 2
    store = DueStore.open(fresh_pg_url)
    try:
        store.schedule(jobs, datetime.now(UTC))
        env = {**worker_env(fresh_pg_url), "RECUR_IMPORTS": "tests.support.io_tasks"}
        first, _ = start_worker("io", concurrency=30, env=env)
        start_scheduler(env)
        wait_for(
            lambda: in_flight(prefix) >= 20 and any(r["ev"] == "end" for r in mine(prefix)),
            60,
            "runs in flight",
            interval=0.02,
        )
        os.kill(first.pid, signal.SIGTERM)
        first.proc.wait(timeout=30)
        assert first.proc.returncode == 0, first.log()[-3000:]
        assert "Traceback" not in first.log(), first.log()[-3000:]
        start_worker("io", concurrency=30, env=env)
        wait_for(
            lambda: (
                not any(
                    s.scheduled or s.dispatched for s in store.stats(datetime.now(UTC)).values()
                )
            ),
            60,
            "every job to finish",
            interval=0.3,
        )
    finally:
        store.close()
        close_stores()
    runs = mine(prefix)
    ends = Counter((r["id"], r["left"]) for r in runs if r["ev"] == "end")
    starts = Counter((r["id"], r["left"]) for r in runs if r["ev"] == "start")
    assert set(ends) == {(j.job_key, n) for j in jobs for n in range(1, runs_each + 1)}
    assert {run: n for run, n in starts.items() if n > 1} == {}, "a run was done twice"
    on_first = {(r["id"], r["left"], r["ev"]) for r in runs if r["pid"] == first.pid}
    assert {(i, n) for i, n, ev in on_first if ev == "start"} == {
        (i, n) for i, n, ev in on_first if ev == "end"
    }, "a run in flight was cut"


def io_message(mid: str, seconds: float) -> dict[str, Any]:
    return {
        "id": mid,
        "user_id": f"u-{mid}",
        "bucket": "io",
        "payload": {"s": seconds, "again_s": 0.1},
    }


@pytest.mark.parametrize("signals", [("SIGTERM", "SIGQUIT"), ("SIGINT", "SIGINT"), ("SIGQUIT",)])
def test_cold_shutdown_of_io_worker_exits_at_once_and_hands_back(
    broker: Any, start_worker: Any, signals: tuple[str, ...]
) -> None:
    """A cold shutdown of the threads pool (tasks/thread_pool.py) gives up its runs in
    flight: it exits at once, without a traceback; the broker hands every message back."""
    prefix = f"cold-{uuid.uuid4().hex[:6]}-"
    env = {"RECUR_IMPORTS": "tests.support.io_tasks"}
    first, _ = start_worker("io", concurrency=10, env=env)
    ids = [f"{prefix}{i}" for i in range(8)]
    for mid in ids:
        io_tasks.io_sleep.delay(io_message(mid, 60.0))
    wait_for(
        lambda: len([r for r in mine(prefix) if r["ev"] == "start"]) == len(ids),
        30,
        "every run started",
        interval=0.05,
    )
    for n, name in enumerate(signals):
        if n:
            time.sleep(1.0)  # the warm shutdown is under way, waiting for the runs
        os.kill(first.pid, getattr(signal, name))
    try:
        first.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        raise AssertionError(
            f"worker still running 10s after {signals}:\n{first.log()[-3000:]}"
        ) from None
    assert "Traceback" not in first.log(), first.log()[-3000:]
    assert "left unacknowledged" in first.log()
    start_worker("io", concurrency=10, env=env)
    wait_for(
        lambda: {r["id"] for r in mine(prefix) if r["ev"] == "end"} == set(ids),
        30,
        "every message handed back and run",
    )
    assert queue_depth(broker, "io.dead") == 0
    assert Counter(r["id"] for r in mine(prefix) if r["ev"] == "end") == Counter(ids)


#: An AMQP basic.publish method frame's class and method ids (60, 40).
BASIC_PUBLISH = b"\x00\x3c\x00\x28"


class Relay:
    """A listener that forwards its first ``forward`` connections to ``target`` (every one:
    None) and holds every later one open without a byte: a service that accepts but never
    answers. Once a client sends a ``basic.publish`` (with ``stall``), the broker's
    replies stop: the publish reaches the queue, its confirm never comes back."""

    def __init__(
        self, target: tuple[str, int] | None, forward: int | None = 0, stall: bool = False
    ) -> None:
        self.target, self.forward, self.stall = target, forward, stall
        self.frozen = threading.Event()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = int(self.listener.getsockname()[1])
        self.held: list[socket.socket] = []
        self.accepted = 0
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            if self.target is None or (self.forward is not None and self.accepted > self.forward):
                self.held.append(client)
                continue
            upstream = socket.create_connection(self.target, timeout=5)
            upstream.settimeout(None)
            self.held += [client, upstream]
            for a, b, to_broker in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(target=self.pipe, args=(a, b, to_broker), daemon=True).start()

    def pipe(self, source: socket.socket, sink: socket.socket, to_broker: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if to_broker and self.stall and BASIC_PUBLISH in data:
                    self.frozen.set()
                while self.frozen.is_set() and not to_broker:
                    time.sleep(0.05)
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        for sock in (self.listener, *self.held):
            with contextlib.suppress(OSError):
                sock.close()


def via(url: str, relay: Relay) -> str:
    return url.replace(":5672/", f":{relay.port}/")


@pytest.mark.parametrize("stage", ["consumer-silent", "store-silent"])
def test_worker_stopped_while_connecting_exits_without_traceback(
    live_services: None, tmp_logs: Path, stage: str
) -> None:
    """SIGTERM while the worker waits for a service that accepts but never answers:
    RabbitMQ for Celery's consumer connection (once its queues are declared), PostgreSQL for
    its store check at start. It ends within seconds, without a traceback."""
    env = {**os.environ, **services.test_environment()}
    if stage == "store-silent":
        silent = Relay(None)
        env["RECUR_DATABASE_URL"] = f"postgresql+psycopg://postgres@127.0.0.1:{silent.port}/test"
    else:
        silent = Relay(("127.0.0.1", 5672), forward=1)  # its queue declaration passes
        env["RECUR_BROKER_URL"] = via(env["RECUR_BROKER_URL"], silent)
    child = spawn(
        f"connecting-{stage}",
        [
            celery_executable(),
            "-A",
            "tasks",
            "worker",
            "-Q",
            "short",
            "-c",
            "1",
            "-l",
            "INFO",
            "--without-mingle",
            "--without-gossip",
        ],
        tmp_logs,
        env,
        cwd=services.ROOT,
    )
    try:
        wanted = 2 if stage == "consumer-silent" else 1
        wait_for(lambda: silent.accepted >= wanted, 30, "the worker to connect")
        time.sleep(1.0)  # it is waiting for the service's answer
        assert child.proc.poll() is None, child.log()[-3000:]
        os.kill(child.pid, signal.SIGTERM)
        try:
            child.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"still running 10s after SIGTERM:\n{child.log()[-3000:]}"
            ) from None
        # before Celery's handlers are installed (its start-up checks) SIGTERM ends it as
        # the signal's default does; nothing was received, nothing is in flight
        assert child.proc.returncode in (0, -signal.SIGTERM), child.log()[-3000:]
        assert "Traceback" not in child.log(), child.log()[-3000:]
    finally:
        child.stop()
        silent.close()


def test_warm_shutdown_of_prefork_worker_loses_and_repeats_no_run(
    broker: Any, fresh_pg_url: str, start_worker: Any, start_scheduler: Any
) -> None:
    """SIGTERM to a prefork worker (to its main process, as docker stop and systemd's
    KillMode=mixed send it) with runs in flight, messages prefetched and reschedules
    being written: each run ends and settles, prefetched messages go back."""
    runs_each = 2
    jobs = recurring_jobs(8, datetime.now(UTC), 0.2, runs_each, buckets=("short",))
    store = DueStore.open(fresh_pg_url)
    log = RunLog()
    try:
        store.schedule(jobs, datetime.now(UTC))
        env = worker_env(fresh_pg_url, RECUR_WORK_SCALE="8")  # a short run works 0.4 s
        first, _ = start_worker("short", concurrency=2, env=env)
        start_scheduler(env)
        wait_for(lambda: sum(log.poll().values()) >= 3, 60, "runs done", interval=0.02)
        # mid-run (runs take 0.4 s): a SIGTERM just as a child takes its next message can
        # meet Celery's race (docs/operations.md#stopping-workers-and-the-scheduler), where
        # the pool's exit waits 30 s more
        time.sleep(0.2)
        os.kill(first.pid, signal.SIGTERM)
        first.proc.wait(timeout=45)
        assert first.proc.returncode == 0, first.log()[-3000:]
        assert "Traceback" not in first.log(), first.log()[-3000:]
        start_worker("short", concurrency=2, env=env)
        wait_until_empty(store, 60)
    finally:
        store.close()
        close_stores()
    runs = log.poll()
    assert {j.job_key: runs[j.job_key] for j in jobs} == {j.job_key: runs_each for j in jobs}


@pytest.mark.parametrize("signals", [("SIGTERM",), ("SIGINT", "SIGINT")])
def test_scheduler_stopped_mid_dispatch_exits_and_every_leased_row_runs(
    broker: Any,
    fresh_pg_url: str,
    start_worker: Any,
    start_scheduler: Any,
    signals: tuple[str, ...],
) -> None:
    """SIGTERM (or SIGINT twice) while a batch's publish waits for confirms of a stalled
    broker (scheduler/stop.py): the scheduler exits in seconds, not after the confirm
    timeout; the rows of the batch it gave up stay due, and every job runs exactly once
    (the copies it had sent are stale and dropped)."""
    jobs = recurring_jobs(200, datetime.now(UTC), 1.0, 1, buckets=("short",))
    store = DueStore.open(fresh_pg_url)
    log = RunLog()
    relay = Relay(("127.0.0.1", 5672), forward=None, stall=True)
    try:
        store.schedule(jobs, datetime.now(UTC))
        env = worker_env(
            fresh_pg_url,
            RECUR_LEASE_SECONDS="60",
            RECUR_DRAIN_BATCH="25",
            RECUR_HIGH_WATERMARK="200",
            RECUR_LOW_WATERMARK="200",
        )
        first = start_scheduler({**env, "RECUR_BROKER_URL": via(services.BROKER_URL, relay)})
        # the first batch's publish stalls the broker's replies: its confirms never come
        wait_for(relay.frozen.is_set, 60, "a publish under way", interval=0.01)
        wait_for(lambda: queue_depth(broker, "short") > 0, 10, "its copies in the queue")
        for n, name in enumerate(signals):
            if n:
                time.sleep(1.0)
            os.kill(first.pid, getattr(signal, name))
        try:
            first.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"scheduler still running 10s after {signals}:\n{first.log()[-3000:]}"
            ) from None
        assert first.proc.returncode == 0, first.log()[-3000:]
        assert "Traceback" not in first.log(), first.log()[-3000:]
        start_worker("short", concurrency=4, env=env)
        start_scheduler(env)
        wait_until_empty(store, 60)
    finally:
        relay.close()
        store.close()
        close_stores()
    runs = log.poll()
    assert {j.job_key: runs[j.job_key] for j in jobs} == {j.job_key: 1 for j in jobs}
