"""`make demo`'s job end to end: Spark seed, scheduler, a worker per bucket, cycles, none lost."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.support import services
from tests.support.processes import recur_argv

pytestmark = pytest.mark.services


def test_demo_seeds_schedules_processes_and_reschedules_losing_nothing(
        live_services: None, tmp_path: Path) -> None:
    env = {**os.environ, **services.test_environment(),
           "RECUR_DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}"}
    result = subprocess.run(recur_argv("demo", "--messages", "60", "--cycles", "2",
                                       "--work-scale", "0.05", "--timeout", "180"),
                            env=env, capture_output=True, text=True, timeout=280,
                            cwd=services.ROOT)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr[-3000:]
    assert re.search(r"spark: seed: read 60, loaded 60, rejected 0", out), out
    assert "seeded 60, every one run 2 times: 60; lost 0, extra runs 0" in out, out
    for bucket in ("short", "medium", "long"):
        assert re.search(rf"worker {bucket}@\S+ up", out), out
