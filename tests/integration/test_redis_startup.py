"""Workers and the scheduler check Redis at start (routing/redis_check.py): a Redis that would
lose parked jobs (an evicting policy, no AOF) is a WARNING line naming the setting and the
fix; with RECUR_STRICT=1 the process does not start (one ``recur: ...`` line, exit code 2).
A Redis whose settings cannot be read, or that is down, never stops a process."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import services
from tests.support.private_redis import PrivateRedis
from tests.support.processes import Child, recur_argv, spawn, wait_for
from tests.support.refusals import refusal_line, service_environment

pytestmark = pytest.mark.services

EVICTING = ("--maxmemory-policy", "allkeys-lru")


@pytest.fixture
def evicting_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path, extra=EVICTING)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        server.client.close()


environment = service_environment


def run_briefly(args: list[str], env: dict[str, str],
                cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(recur_argv(*args), env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def assert_refused(result: subprocess.CompletedProcess[str], process: str) -> None:
    line = refusal_line(result)
    assert "Redis maxmemory-policy is allkeys-lru, recur needs noeviction" in line
    assert "CONFIG SET maxmemory-policy noeviction" in line
    assert f"RECUR_STRICT=1: the {process} does not start" in line


@pytest.mark.parametrize(("args", "process"), [(["worker", "short"], "worker"),
                                               (["scheduler"], "scheduler")])
def test_strict_refuses_to_start_against_an_evicting_redis(
        live_services: None, sqlite_url: str, evicting_redis: PrivateRedis, tmp_path: Path,
        args: list[str], process: str) -> None:
    env = environment(RECUR_STRICT="1", RECUR_REDIS_URL=evicting_redis.url,
                      RECUR_DATABASE_URL=sqlite_url)
    assert_refused(run_briefly(args, env, tmp_path), process)


def started(child: Child, marker: str) -> Any:
    """Wait until the child's log shows ``marker``; it must still run."""
    def shown() -> bool:
        if child.proc.poll() is not None:
            raise AssertionError(f"{child.name} exited with {child.proc.returncode}:\n"
                                 f"{child.log()[-3000:]}")
        return marker in child.log()

    wait_for(shown, 60, f"{child.name} to log {marker!r}")


def test_without_strict_the_scheduler_warns_and_runs(
        live_services: None, sqlite_url: str, evicting_redis: PrivateRedis,
        start_scheduler: Any) -> None:
    child = start_scheduler({"RECUR_REDIS_URL": evicting_redis.url,
                             "RECUR_DATABASE_URL": sqlite_url})
    started(child, "scheduler started")
    log = child.log()
    [warning] = [line for line in log.splitlines() if "maxmemory-policy" in line]
    assert "WARNING/recur.redis" in warning and "CONFIG SET maxmemory-policy noeviction" in warning
    assert "appendonly" not in log  # the private Redis has AOF: nothing to say about it


def test_without_strict_the_worker_warns_and_runs(
        live_services: None, sqlite_url: str, evicting_redis: PrivateRedis,
        tmp_path: Path) -> None:
    env = environment(RECUR_REDIS_URL=evicting_redis.url, RECUR_DATABASE_URL=sqlite_url)
    child = spawn("worker-evicting", recur_argv("worker", "short", "-c", "1", "--without-mingle",
                                                "--without-gossip"), tmp_path / "logs", env,
                  cwd=services.ROOT)
    try:
        started(child, "ready.")
        [warning] = [line for line in child.log().splitlines() if "maxmemory-policy" in line]
        assert warning.startswith("[WARNING/recur.redis] Redis maxmemory-policy is allkeys-lru")
    finally:
        child.stop()


@pytest.mark.parametrize("redis_args", [
    ("--rename-command", "CONFIG", "", "--rename-command", "INFO", ""), None])
def test_unreadable_or_down_redis_never_stops_a_strict_scheduler(
        live_services: None, sqlite_url: str, tmp_path: Path, start_scheduler: Any,
        redis_args: tuple[str, ...] | None) -> None:
    server = PrivateRedis(tmp_path, extra=redis_args or ())
    url = server.url
    if redis_args is not None:
        server.start()
    try:
        child = start_scheduler({"RECUR_REDIS_URL": url, "RECUR_DATABASE_URL": sqlite_url,
                                 "RECUR_STRICT": "1"})
        started(child, "scheduler started")
        said = "cannot be read" if redis_args is not None else "cannot check Redis's settings"
        assert said in child.log()
    finally:
        server.stop()
        server.client.close()
