"""Serve a process's Prometheus metrics on RECUR_METRICS_PORT (0: off)."""

from __future__ import annotations

import logging
import os

from prometheus_client import REGISTRY, CollectorRegistry, start_http_server

from config.errors import ConfigError
from config.settings import Settings

log = logging.getLogger("recur.metrics")

#: prometheus_client's directory for processes that share one endpoint (prefork workers).
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def serve_metrics(cfg: Settings, registry: CollectorRegistry | None = None,
                  what: str = "process") -> int | None:
    """Start the /metrics endpoint in a daemon thread; returns its port (None: off)."""
    if not cfg.metrics_port:
        return None
    if registry is None:
        registry = REGISTRY
        if os.environ.get(MULTIPROC_ENV):
            from prometheus_client import multiprocess

            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    try:
        start_http_server(cfg.metrics_port, registry=registry)
    except OSError as exc:
        raise ConfigError(f"RECUR_METRICS_PORT={cfg.metrics_port}: cannot serve {what} "
                          f"metrics: {exc}") from exc
    log.info("%s metrics on http://0.0.0.0:%d/metrics", what, cfg.metrics_port)
    return cfg.metrics_port
