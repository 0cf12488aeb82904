"""The real services the tests use, and this run's isolated piece of each.

A test run gets its own RabbitMQ vhost and its own Redis key prefix (and,
where used, its own PostgreSQL schema). A service that is down is started
with scripts/ensure-services.sh; if it still is not there the run fails
loudly: a test that needs a service never skips.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: One id per test process (``RECURTEST_RUN`` names it, else a fresh one), plus the
#: pytest-xdist worker's name (gw0, gw1) under ``-n``: each xdist worker has its own
#: vhost, key prefix and schema. Importing this module changes no environment variable:
#: tests/conftest.py is where the run's RECUR_* variables are set.
RUN_ID = (os.environ.get("RECURTEST_RUN") or uuid.uuid4().hex[:10]) + os.environ.get(
    "PYTEST_XDIST_WORKER", "")
VHOST = f"recur-test-{RUN_ID}"
KEY_PREFIX = f"recur-test-{RUN_ID}"
BROKER_URL = f"amqp://guest:guest@127.0.0.1:5672/{VHOST}"
REDIS_URL = "redis://127.0.0.1:6379/0"
PORTS = {"RabbitMQ": 5672, "Redis": 6379, "PostgreSQL": 5432}


def test_environment() -> dict[str, str]:
    """RECUR_* variables that point this run at its own vhost and key prefix."""
    return {
        "RECUR_BROKER_URL": BROKER_URL,
        "RECUR_REDIS_URL": REDIS_URL,
        "RECUR_KEY_PREFIX": KEY_PREFIX,
        "RECUR_LOG_LEVEL": "INFO",
    }


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def ensure_services() -> None:
    """Start whatever is down; fail the run naming any service still missing."""
    if all(port_open(p) for p in PORTS.values()):
        return
    result = subprocess.run([str(ROOT / "scripts" / "ensure-services.sh")],
                            capture_output=True, text=True, timeout=300)
    missing = [name for name, port in PORTS.items() if not port_open(port)]
    if missing:
        pytest.fail(f"services down and could not be started: {', '.join(missing)}\n"
                    f"{result.stdout}{result.stderr}", pytrace=False)


def rabbitmqctl(*args: str) -> None:
    result = subprocess.run(["rabbitmqctl", *args], capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        pytest.fail(f"rabbitmqctl {' '.join(args)} failed: {result.stderr}", pytrace=False)


def create_vhost() -> None:
    rabbitmqctl("add_vhost", VHOST)
    rabbitmqctl("set_permissions", "-p", VHOST, "guest", ".*", ".*", ".*")


def delete_vhost() -> None:
    subprocess.run(["rabbitmqctl", "delete_vhost", VHOST], capture_output=True, timeout=120)


@contextmanager
def scratch_vhost(tag: str, configure: str = ".*") -> Iterator[str]:
    """A vhost of one test's own (guest may configure what ``configure`` matches), for a test
    that changes topology or permissions the run's shared vhost must keep; removed after."""
    name = f"{VHOST}-{tag}-{uuid.uuid4().hex[:6]}"
    rabbitmqctl("add_vhost", name)
    try:
        rabbitmqctl("set_permissions", "-p", name, "guest", configure, ".*", ".*")
        yield name
    finally:
        subprocess.run(["rabbitmqctl", "delete_vhost", name], capture_output=True, timeout=120)


def delete_redis_keys() -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter(match=f"{KEY_PREFIX}:*", count=1000):
        client.delete(key)


def installed_program(program: str) -> str:
    """``program``'s path, installed by the set-up script (the service of the same name)
    when missing: a test that needs it fails loudly, never skips."""
    found = shutil.which(program)
    if found is None:
        subprocess.run([str(ROOT / "scripts" / "ensure-services.sh"), program],
                       capture_output=True, timeout=600)
        found = shutil.which(program)
    if found is None:
        pytest.fail(f"{program} missing after scripts/ensure-services.sh {program}",
                    pytrace=False)
    return found
