"""One real ``recur flower`` process for a test module, answering before it is used."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.support import services
from tests.support.processes import Child, recur_argv, spawn, wait_for


def wait_until_answering(child: Child, base: str, timeout: float) -> None:
    """Wait for Flower at ``base`` to answer its health check; its log if it exits."""

    def answering() -> bool:
        if child.proc.poll() is not None:
            raise RuntimeError(f"flower exited:\n{child.log()[-3000:]}")
        try:
            httpx.get(f"{base}/healthcheck", timeout=2)
        except httpx.TransportError:
            return False
        return True

    wait_for(answering, timeout, "Flower to listen")


@contextmanager
def running_flower(log_dir: Path, user: str, password: str,
                   **extra_env: str) -> Iterator[str]:
    """Start Flower behind basic auth on a free port; yield its base URL; stop it."""
    port = services.free_port()
    env = {**os.environ, **services.test_environment(), "RECUR_FLOWER_USER": user,
           "RECUR_FLOWER_PASSWORD": password, "RECUR_FLOWER_PORT": str(port), **extra_env}
    child: Child = spawn("flower", recur_argv("flower", "--address=127.0.0.1"), log_dir, env,
                         cwd=services.ROOT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_answering(child, base, 60)
        yield base
    finally:
        child.stop()
