"""The Grafana dashboard only queries metrics recur really exports, and compose wires it."""

from __future__ import annotations

import importlib
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest

from config.lazy_metrics import create_all
from routing.broker import QueueStats
from scheduler.store import BucketHead, BucketStats
from tasks.metrics.collector import EXPORTED, SystemCollector
from tasks.metrics.destinations import DestinationFigures
from tasks.metrics.lock_source import LockFigures
from tasks.metrics.system import Refresher, Snapshot

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "config" / "monitoring" / "grafana" / "dashboards" / "recur.json"
METRIC = re.compile(r"\brecur_[a-z_]+\b")


def full_snapshot() -> Snapshot:
    """A snapshot with a figure from every source, as a refresh leaves it."""
    now = datetime.now(UTC)
    return Snapshot(
        heads={"short": BucketHead("short", now - timedelta(seconds=5), 3, False, 2, 1, 0)},
        totals={"short": BucketStats("short", 10, 3, now, 2, 0, 1, 0)},
        queues={"short": QueueStats("short", 4, 1), "short.dead": QueueStats("short.dead", 1, 0)},
        lock=LockFigures({"busy": 2, "handovers": 1}, 1),
        destinations=[DestinationFigures("crm", 1, 2, 3, 0, refused={"401": 2})],
        destinations_seen=1,
        due_histogram={"short": [3, 0]},
        read_at={"store": 0.0}, took={"store": 0.1}, up={"store": True})


def sample_names(registry: CollectorRegistry) -> set[str]:
    text = generate_latest(registry).decode()
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines()
            if line and not line.startswith("#")}


def exporter_names() -> set[str]:
    from config.settings import load_settings

    refresher = Refresher(load_settings({}))
    refresher.snapshot = full_snapshot()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SystemCollector(refresher))
    return sample_names(registry)


def process_names() -> set[str]:
    """Every name the per-process metrics can take (counters, histograms, their suffixes)."""
    # Importing declares them (the scheduler's counters, the lock's, the worker's);
    # create_all registers them, as serving /metrics does (config/lazy_metrics.py).
    for module in ("scheduler.metrics", "tasks.distlock.job", "tasks.metrics.worker_hooks",
                   "routing.reseq.hold"):
        importlib.import_module(module)
    create_all()

    names: set[str] = set()
    for metric in REGISTRY.collect():
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"),
                    "gauge": ("",)}.get(metric.type, ("",))
        names |= {metric.name + s for s in suffixes}
    return names


def panel_queries() -> list[tuple[str, str]]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return [(panel["title"], target["expr"]) for panel in doc["panels"]
            for target in panel["targets"]]


def test_the_exporter_exports_what_it_declares() -> None:
    assert exporter_names() == set(EXPORTED)


def test_an_empty_store_exports_zero_waiting_jobs_not_nothing() -> None:
    from config.settings import load_settings

    refresher = Refresher(load_settings({}))
    refresher.snapshot = Snapshot(totals={}, read_at={"totals": 0.0})  # counted: no rows
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SystemCollector(refresher))
    assert registry.get_sample_value("recur_jobs_scheduled", {"bucket": "short"}) == 0
    refresher.snapshot = Snapshot()  # never counted yet: no figure rather than a false 0
    assert registry.get_sample_value("recur_jobs_scheduled", {"bucket": "short"}) is None


def test_every_panel_queries_an_exported_metric() -> None:
    known = exporter_names() | process_names()
    queries = panel_queries()
    assert len(queries) >= 10
    for title, expr in queries:
        used = set(METRIC.findall(expr))
        assert used, f"panel {title!r} queries no recur metric: {expr}"
        assert used <= known, f"panel {title!r} queries {used - known}, which nothing exports"


def test_the_dashboard_covers_backlog_lag_throughput_dead_lock_and_resequencer() -> None:
    text = " ".join(expr for _, expr in panel_queries())
    for metric in ("recur_jobs_scheduled", "recur_jobs_lag_seconds",
                   "recur_scheduler_dispatched_total", "recur_dead_letter_messages",
                   "recur_lock_stats_total", "recur_resequencer_buffered"):
        assert metric in text


def test_the_dashboard_shows_lateness_run_time_per_task_and_resequencer_hold() -> None:
    text = " ".join(expr for _, expr in panel_queries())
    for metric in ("recur_worker_lateness_seconds_bucket", "recur_worker_lateness_seconds_count",
                   "recur_resequencer_hold_seconds_bucket"):
        assert metric in text
    assert "by (le, bucket, task)" in text  # run time per task, not only per bucket


def test_the_late_share_panel_asks_for_a_bound_the_histogram_has() -> None:
    from tasks.metrics.worker_hooks import LATENESS_BUCKETS

    assert 60 in LATENESS_BUCKETS  # "what share of runs start more than a minute late"
    late = [expr for _, expr in panel_queries() if "le=~" in expr]
    assert late and all(r'le=~"60(\\.0)?"' in expr for expr in late)


def test_compose_provisions_prometheus_and_grafana_with_the_dashboard() -> None:
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    assert services["exporter"]["command"] == ["recur", "exporter"]
    mounts = " ".join(services["grafana"]["volumes"])
    assert "config/monitoring/grafana/dashboards" in mounts
    assert "config/monitoring/prometheus.yml" in " ".join(services["prometheus"]["volumes"])
    scrape = yaml.safe_load((ROOT / "config" / "monitoring" / "prometheus.yml").read_text())
    targets = [t for job in scrape["scrape_configs"] for c in job["static_configs"]
               for t in c["targets"]]
    assert "exporter:9808" in targets and "scheduler:9100" in targets
