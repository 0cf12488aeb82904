"""A private Prometheus for the tests: Debian's ``prometheus`` binary (installed by
scripts/ensure-services.sh, never skipped) on its own port and data directory, scraping
the targets a test names with the shipped config's job names, every ``interval``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support import services
from tests.support.processes import Child, spawn, wait_for

#: The scrape config docker compose ships; the test keeps its jobs, with its own targets.
SHIPPED = services.ROOT / "config" / "monitoring" / "prometheus.yml"


def prometheus_binary() -> str:
    """Debian's prometheus, installed by the set-up script when it is missing."""
    return services.installed_program("prometheus")


def scrape_config(targets: dict[str, list[str]], interval: str) -> dict[str, Any]:
    """The shipped config with ``targets`` (job name -> host:port) and a short interval."""
    config: dict[str, Any] = yaml.safe_load(SHIPPED.read_text())
    jobs = {job["job_name"] for job in config["scrape_configs"]}
    assert set(targets) <= jobs, f"jobs {set(targets) - jobs} are not in {SHIPPED.name}"
    config["global"] = {"scrape_interval": interval, "evaluation_interval": interval}
    config["scrape_configs"] = [
        {**job, "static_configs": [{"targets": targets[job["job_name"]]}]}
        for job in config["scrape_configs"] if job["job_name"] in targets]
    return config


@dataclass
class Prometheus:
    """A running private Prometheus and its HTTP API."""

    child: Child
    url: str

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector (or scalar, as one sample) of ``expr``; a query Prometheus
        refuses fails the test with its error."""
        if self.child.proc.poll() is not None:
            raise RuntimeError(f"prometheus exited:\n{self.child.log()[-3000:]}")
        reply = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10)
        body = reply.json()
        if body.get("status") != "success":
            pytest.fail(f"prometheus refused {expr!r}: {body.get('error')}", pytrace=False)
        data = body["data"]
        result = data["result"]
        return list(result) if data["resultType"] in ("vector", "matrix") else [
            {"metric": {}, "value": result}]

    def targets(self) -> dict[str, str]:
        """Each active target's scrape URL and its health (up, down, unknown)."""
        reply = httpx.get(f"{self.url}/api/v1/targets", timeout=10).json()
        return {t["scrapeUrl"]: t["health"] for t in reply["data"]["activeTargets"]}


def start_prometheus(targets: dict[str, list[str]], workdir: Path,
                     interval: str = "1s") -> Prometheus:
    """Start a Prometheus scraping ``targets``; returns once it is ready. Stop its child."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "prometheus.yml"
    config.write_text(yaml.safe_dump(scrape_config(targets, interval)))
    port = services.free_port()
    child = spawn("prometheus", [
        prometheus_binary(), f"--config.file={config}",
        f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=1h", "--log.level=warn"], workdir / "logs")
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if child.proc.poll() is not None:
            raise RuntimeError(f"prometheus exited:\n{child.log()[-3000:]}")
        try:
            return httpx.get(f"{url}/-/ready", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for(ready, 60, "prometheus to be ready", interval=0.2)
    except BaseException:
        child.stop()
        raise
    return Prometheus(child, url)
