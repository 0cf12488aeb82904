"""docker-compose.yml runs the whole stack with health checks and no baked-in secrets."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from config.buckets import BUCKETS

ROOT = Path(__file__).resolve().parents[2]


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def test_services_and_one_worker_per_bucket() -> None:
    services = compose()["services"]
    assert {"rabbitmq", "redis", "postgres", "flower", "scheduler", "seed"} <= set(services)
    for bucket in BUCKETS:
        worker = services[f"worker-{bucket.name}"]
        assert worker["command"] == ["recur", "worker", bucket.name]
        assert worker["depends_on"]["rabbitmq"]["condition"] == "service_healthy"
    assert "management" in services["rabbitmq"]["image"]


def test_every_long_running_service_has_a_health_check() -> None:
    services = compose()["services"]
    for name in ["rabbitmq", "redis", "postgres", *(f"worker-{b.name}" for b in BUCKETS)]:
        assert "healthcheck" in services[name], name


def test_credentials_come_from_env_file_only() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    for secret in re.findall(r"^\s*\w*PASS\w*:\s*(\S+)", text, re.MULTILINE):
        assert secret.startswith("${"), f"literal secret in docker-compose.yml: {secret}"
    example = (ROOT / ".env.example").read_text()
    for var in set(re.findall(r"\$\{(\w+)", text)):
        assert f"{var}=" in example, f"{var} used by docker-compose.yml, missing from .env.example"
