"""Test-run set-up shared by every test directory.

The RECUR_* variables are set before any test module imports the Celery app,
so the app, and every worker the tests start, use this run's own vhost and
Redis key prefix (one per pytest-xdist worker: tests/support/services.py).

``make test`` runs the suite on two pytest-xdist workers (``--dist
loadgroup``). The tests that start real processes (workers, schedulers,
Spark, clusters) are timed for two cores, so they run one at a time in two
lines, each on one xdist worker: the fault tests (``faults``) and the other
process tests (``processes``); the tests that only talk to the services fill
the gaps. One line at a time would be ~30 min, over CI's budget.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.services import test_environment

os.environ.update(test_environment())

pytest_plugins = ["tests.support.fixtures", "tests.support.store_fixtures",
                  "tests.support.spark_fixtures"]

#: Modules outside tests/faults whose tests start long-lived processes or Spark.
PROCESS_MODULES = frozenset({
    "test_bucket_routing", "test_demo", "test_destination_refusals", "test_distlock_park",
    "test_distlock_workers", "test_rate_limit_workers",
    "test_exporter", "test_flower", "test_flower_chromium", "test_flower_scheduled",
    "test_head_of_line",
    "test_forged_headers", "test_redis_caps", "test_scheduler_bad_rows", "test_transform_keys",
    "test_worker_store_startup",
    "test_job_control_process", "test_process_metrics", "test_redis_startup", "test_resequencer",
    "test_scheduler_cycle", "test_scheduler_process", "test_seed", "test_seed_end_to_end",
    "test_seed_sinks", "test_user_tasks", "test_watermark_schedulers", "test_worker_profile",
    "test_transform", "test_transform_copy", "test_metrics_access",
    "test_jitter_seed", "test_jitter_workers", "test_prometheus_panels",
    "test_tracing_workers", "test_destination_rate", "test_bucket_rate_workers",
    "test_stored_result", "test_fair_share_process",
    "test_scheduler_idle", "test_bench_quiet", "test_store_hostile_roles",
    "test_topology_conflicts", "test_job_races", "test_misbehaving_tasks"})


#: Process modules run in the faults line instead: the two lines run side by side on CI's two
#: cores, so their sums of durations are kept about equal (`pytest --durations=0`).
FAULTS_LINE_MODULES = frozenset({"test_seed_sinks", "test_seed_end_to_end"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put each process-starting test in its line (an xdist group; no-op without -n)."""
    for item in items:
        path = Path(str(item.path))
        if path.parent.name == "faults" or path.stem in FAULTS_LINE_MODULES:
            item.add_marker(pytest.mark.xdist_group("faults"))
        elif path.stem in PROCESS_MODULES:
            item.add_marker(pytest.mark.xdist_group("processes"))
