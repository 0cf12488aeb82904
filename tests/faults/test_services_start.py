"""The set-up script starts a service that is down instead of letting tests skip."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

import pytest
import redis

from tests.support import services

pytestmark = pytest.mark.services
SCRIPT = services.ROOT / "scripts" / "ensure-services.sh"


def test_a_redis_that_is_down_is_started(tmp_path: Path) -> None:
    # A private Redis on its own port: the shared one other tests use stays up.
    port = services.free_port()
    env = {**os.environ, "REDIS_PORT": str(port), "REDIS_DIR": str(tmp_path)}
    client = redis.Redis(port=port, socket_connect_timeout=1)
    with pytest.raises(redis.ConnectionError):
        client.ping()
    result = subprocess.run([str(SCRIPT), "redis"], env=env, capture_output=True, text=True,
                            timeout=120)
    try:
        assert result.returncode == 0, result.stderr
        assert "redis is down, starting it" in result.stdout
        assert "redis started" in result.stdout
        assert client.ping() is True
        again = subprocess.run([str(SCRIPT), "redis"], env=env, capture_output=True, text=True,
                               timeout=60)
        assert "redis is up" in again.stdout
    finally:
        # Shutting down closes the connection under us.
        with contextlib.suppress(redis.ConnectionError):
            client.shutdown(nosave=True)


def test_all_services_are_up_after_the_script() -> None:
    result = subprocess.run([str(SCRIPT)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert all(services.port_open(port) for port in services.PORTS.values())
