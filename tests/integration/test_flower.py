"""Flower runs behind basic auth and shows the workers with their bucket queues."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import services
from tests.support.processes import recur_argv, spawn, wait_for

pytestmark = pytest.mark.services


def test_flower_refuses_to_start_without_credentials() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECUR_FLOWER")}
    result = subprocess.run(recur_argv("flower"), env=env, capture_output=True, text=True,
                            timeout=60, cwd=services.ROOT)
    assert result.returncode == 2
    assert "RECUR_FLOWER_USER and RECUR_FLOWER_PASSWORD must be set" in result.stderr


def test_flower_requires_auth_and_lists_workers_with_queues(
        start_worker: Any, tmp_logs: Path) -> None:
    _, node = start_worker("medium")
    port = services.free_port()
    env = {**os.environ, **services.test_environment(), "RECUR_FLOWER_USER": "ops",
           "RECUR_FLOWER_PASSWORD": "s3cret-test", "RECUR_FLOWER_PORT": str(port)}
    flower = spawn("flower", recur_argv("flower", "--address=127.0.0.1"), tmp_logs, env,
                   cwd=services.ROOT)
    url = f"http://127.0.0.1:{port}/api/workers"
    try:
        def answering() -> bool:
            if flower.proc.poll() is not None:
                raise RuntimeError(f"flower exited:\n{flower.log()[-3000:]}")
            try:
                httpx.get(url, timeout=2)
            except httpx.TransportError:
                return False
            return True

        wait_for(answering, 60, "Flower to listen")
        assert httpx.get(url, timeout=10).status_code == 401
        assert httpx.get(url, auth=("ops", "wrong"), timeout=10).status_code == 401
        workers: dict[str, Any] = {}

        def lists_worker() -> bool:
            reply = httpx.get(url, params={"refresh": "1"}, auth=("ops", "s3cret-test"),
                              timeout=20)
            assert reply.status_code == 200
            workers.update(reply.json())
            return node in workers and bool(workers[node].get("active_queues"))

        wait_for(lists_worker, 60, f"Flower to list {node}", interval=1)
        assert [q["name"] for q in workers[node]["active_queues"]] == ["medium"]
    finally:
        flower.stop()
