"""``recur status`` and ``recur db upgrade`` as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from scheduler.store import DueStore
from tests.support import services
from tests.support.processes import recur_argv
from tests.support.scheduler_support import recurring_jobs


def recur(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(recur_argv(*args), capture_output=True, text=True, timeout=60,
                          cwd=services.ROOT,
                          env={**os.environ, **services.test_environment(), **env})


def test_db_upgrade_then_status_json(tmp_path: Path, broker: Any) -> None:
    env = {"RECUR_DATABASE_URL": f"sqlite:///{tmp_path / 'due.sqlite3'}"}
    refused = recur("status", env=env)
    assert refused.returncode == 2 and "recur db upgrade" in refused.stderr
    upgraded = recur("db", "upgrade", env=env)
    assert upgraded.returncode == 0, upgraded.stderr
    store = DueStore.open(env["RECUR_DATABASE_URL"])
    now = datetime.now(UTC)
    store.schedule(recurring_jobs(3, now - timedelta(seconds=60), 1, 1, buckets=("short",))
                   + recurring_jobs(2, now + timedelta(hours=1), 1, 1, buckets=("long",)), now)
    store.close()
    shown = recur("status", "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    by_bucket = {b["bucket"]: b for b in json.loads(shown.stdout)["buckets"]}
    short, long_ = by_bucket["short"], by_bucket["long"]
    assert (short["scheduled"], short["due_now"], short["queue_depth"]) == (3, 3, 0)
    assert short["lag_seconds"] >= 60
    assert (long_["scheduled"], long_["due_now"], long_["lag_seconds"]) == (2, 0, 0.0)
    assert by_bucket["medium"]["scheduled"] == 0
    table = recur("status", env=env)
    assert table.stdout.splitlines()[0].split()[:3] == ["bucket", "scheduled", "due"]
