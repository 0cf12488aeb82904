"""``recur exporter``: the one process that exports the system-wide gauges.

One per deployment (several would export the same figures twice). It needs
RECUR_METRICS_PORT; what it reads and how a scrape stays cheap: system.py.
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

from prometheus_client import CollectorRegistry

from config.errors import ConfigError
from config.settings import Settings
from tasks.metrics.collector import SystemCollector
from tasks.metrics.serve import serve_metrics
from tasks.metrics.system import Refresher

log = logging.getLogger("recur.exporter")


def exporter_registry(refresher: Refresher) -> CollectorRegistry:
    """A registry holding only the system-wide collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SystemCollector(refresher))
    return registry


def run_exporter(cfg: Settings) -> None:
    """Serve the system-wide gauges until SIGTERM/SIGINT."""
    if not cfg.metrics_port:
        raise ConfigError("recur exporter needs RECUR_METRICS_PORT (the port Prometheus "
                          "scrapes, e.g. 9808)")
    stopping = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    refresher = Refresher(cfg)
    serve_metrics(cfg, exporter_registry(refresher), what="system-wide")
    refresher.start()
    log.info("exporter: reading the store, queues and Redis every %.0fs", cfg.metrics_refresh)
    stopping.wait()
    refresher.stop()
    log.info("exporter stopped")
