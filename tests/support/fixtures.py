"""Fixtures for tests against the real services and real worker processes."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kombu import Connection

from config.buckets_in_use import BUCKETS
from routing.waits import LEVELS, level_name
from tests.support import services


@pytest.fixture(scope="session")
def live_services() -> Iterator[None]:
    """The real services, with this run's vhost; torn down at the end of the run."""
    services.ensure_services()
    services.create_vhost()
    from config.settings import settings
    from routing.queues import declare_topology
    from tasks.app import app

    with app.connection_for_write() as conn:
        declare_topology(conn, settings())
    yield
    services.delete_vhost()
    services.delete_redis_keys()


@pytest.fixture(scope="session")
def celery_app(live_services: None) -> Any:
    """recur's Celery app, pointed at this run's vhost (with the test tasks registered)."""
    import tests.support.fault_tasks  # noqa: F401 - registers the fault tasks
    from tasks.app import app

    return app


@pytest.fixture
def broker(celery_app: Any) -> Iterator[Connection]:
    """A broker connection; every bucket queue and dead queue is empty at the start, and
    so are the short-wait queues: an earlier test's rate-limited jobs waiting there
    (up to routing.waits.MAX_WAIT) would arrive in this test's bucket queue."""
    with celery_app.connection_for_write() as conn:
        with conn.channel() as channel:
            for bucket in BUCKETS:
                for name in (bucket.queue, bucket.dead_queue):
                    channel.queue_purge(name)
            for level in range(LEVELS):
                channel.queue_purge(level_name(level))
        yield conn


@pytest.fixture
def redis_client(live_services: None) -> redis.Redis:
    from routing.redis_client import get_redis

    return get_redis()


@pytest.fixture
def tmp_logs(tmp_path: Path) -> Path:
    return tmp_path / "logs"


WorkerFactory = Callable[..., tuple[Any, str]]


@pytest.fixture
def start_worker(celery_app: Any, tmp_logs: Path) -> Iterator[WorkerFactory]:
    """Start real ``celery -A tasks worker`` processes; each answers ping before use.

    Returns ``(child, nodename)``; every worker is stopped when the test ends.
    """
    started = []

    def start(queue: str, *, concurrency: int = 2, env: dict[str, str] | None = None,
              args: tuple[str, ...] = ()) -> tuple[Any, str]:
        child, nodename = spawn_worker(
            celery_app, queue, tmp_logs, concurrency=concurrency, env=env,
            args=("--include", "tests.support.fault_tasks", *args))
        started.append(child)
        return child, nodename

    yield start
    for child in started:
        child.stop()



def spawn_worker(celery_app: Any, queue: str, log_dir: Path, *, concurrency: int,
                 env: dict[str, str] | None = None, args: tuple[str, ...] = ()) -> tuple[Any, str]:
    """Start ``celery -A tasks worker -Q <queue>`` on this run's services; return it once it
    answers ping, with its node name. The caller stops it."""
    from tasks.cli.worker import celery_executable
    from tests.support.processes import spawn, wait_for_worker

    name = f"{queue}-{uuid.uuid4().hex[:6]}"
    nodename = f"{name}@{socket.gethostname()}"
    argv = [celery_executable(), "-A", "tasks", "worker", "-Q", queue, "-n", nodename,
            "-c", str(concurrency), "-l", "INFO", "--without-mingle", "--without-gossip", *args]
    child = spawn(name, argv, log_dir, {**os.environ, **services.test_environment(),
                                        **(env or {})}, cwd=services.ROOT)
    try:
        wait_for_worker(celery_app, child, nodename)
    except BaseException:
        child.stop()
        raise
    return child, nodename
