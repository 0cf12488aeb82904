"""Metrics off cost nothing (docs/operations.md#prometheus-metrics): a lazy metric imports
prometheus_client and registers itself on first use, and a worker counts its runs only
when its metrics are read (RECUR_METRICS_PORT or PROMETHEUS_MULTIPROC_DIR)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from config.lazy_metrics import counter, create_all, histogram

ROOT = Path(__file__).resolve().parents[2]

#: Runs a no-op task before and after what ``worker_init`` runs, in a fresh interpreter.
COUNT_RUNS = """
import json, sys
from tasks.app import app
from tasks.metrics import worker_hooks

@app.task(name="tests.lazy_metrics.noop")
def noop():
    return "ok"

noop.apply()
loaded_before = "prometheus_client" in sys.modules
worker_hooks.serve_worker_metrics()
noop.apply()
from prometheus_client import REGISTRY
runs = REGISTRY.get_sample_value("recur_worker_tasks_total", {
    "bucket": "direct", "task": "tests.lazy_metrics.noop", "state": "SUCCESS"})
print(json.dumps([loaded_before, runs]))
"""


def count_runs(**env: str) -> list[object]:
    full = {k: v for k, v in os.environ.items()
            if k not in ("RECUR_METRICS_PORT", "PROMETHEUS_MULTIPROC_DIR")}
    out = subprocess.run([sys.executable, "-c", COUNT_RUNS], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=True, env={**full, **env})
    answer: list[object] = json.loads(out.stdout.strip().splitlines()[-1])
    return answer


def test_a_lazy_metric_is_registered_on_first_use() -> None:
    name = f"recur_test_lazy_{uuid.uuid4().hex[:8]}"
    runs = counter(name, "A test counter.", ["task"])
    assert not runs.created and REGISTRY.get_sample_value(f"{name}_total", {"task": "t"}) is None
    runs.labels("t").inc()
    runs.labels("t").inc(2)
    assert runs.created and REGISTRY.get_sample_value(f"{name}_total", {"task": "t"}) == 3


def test_create_all_registers_every_declared_metric_with_its_options() -> None:
    name = f"recur_test_lazy_{uuid.uuid4().hex[:8]}"
    unlabelled = counter(f"{name}_plain", "A test counter without labels.")
    held = histogram(f"{name}_seconds", "A test histogram.", ["d"], buckets=(1, 5))
    create_all()
    assert unlabelled.created and held.created
    assert REGISTRY.get_sample_value(f"{name}_plain_total") == 0  # listed from the start
    held.labels("x").observe(2)
    assert REGISTRY.get_sample_value(f"{name}_seconds_bucket", {"d": "x", "le": "1.0"}) == 0
    assert REGISTRY.get_sample_value(f"{name}_seconds_bucket", {"d": "x", "le": "5.0"}) == 1


@pytest.mark.timeout(240)
def test_a_worker_with_metrics_off_neither_imports_prometheus_nor_counts() -> None:
    assert count_runs() == [False, None]


@pytest.mark.timeout(240)
def test_a_worker_writing_for_a_shared_endpoint_counts_its_runs(tmp_path: Path) -> None:
    # The first run came before worker_init connected the hooks: only the second counts.
    assert count_runs(PROMETHEUS_MULTIPROC_DIR=str(tmp_path)) == [False, 1.0]
