"""A worker checks its due-jobs store at start (tasks/signals.py): a store at another schema
revision, or a SQLite file that is not there, would fail every run and spend each
message's deliveries until it is dead-lettered, so the worker does not start (one
``recur: ...`` line, exit code 2, as the scheduler). A store that cannot be reached is an
outage: the worker starts and its runs ride it out."""

from __future__ import annotations

import os
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import services
from tests.support.processes import recur_argv, spawn, wait_for_worker
from tests.support.store_fixtures import run_pg

pytestmark = pytest.mark.services


def environment(**env: str) -> dict[str, str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("RECUR_")}
    return {**full, **services.test_environment(), **env}


@pytest.fixture
def unmigrated_pg_url() -> Iterator[str]:
    schema = f"recur_unmigrated_{uuid.uuid4().hex[:8]}"
    run_pg(f"CREATE SCHEMA {schema}")
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/test?options=-csearch_path%3D{schema}"
    finally:
        run_pg(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def assert_refused(result: subprocess.CompletedProcess[str]) -> None:
    out = result.stdout + result.stderr
    assert result.returncode == 2, out
    assert "Traceback" not in out
    said = [line for line in result.stderr.splitlines() if line.startswith("recur:")]
    assert len(said) == 1, out
    assert "run `recur db upgrade`" in said[0]


@pytest.mark.parametrize("store", ["missing_sqlite", "unmigrated_pg"])
def test_a_worker_refuses_a_store_it_cannot_run_against(
        live_services: None, tmp_path: Path, store: str, request: pytest.FixtureRequest) -> None:
    url = (f"sqlite:///{tmp_path / 'nowhere' / 'due.sqlite3'}" if store == "missing_sqlite"
           else str(request.getfixturevalue("unmigrated_pg_url")))
    result = subprocess.run(recur_argv("worker", "short"), env=environment(
        RECUR_DATABASE_URL=url), cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert_refused(result)
    assert not (tmp_path / "nowhere").exists()  # no empty SQLite store made on the way


def test_a_worker_starts_while_its_store_is_unreachable(
        live_services: None, celery_app: Any, tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    node = f"storeless-{uuid.uuid4().hex[:6]}@{socket.gethostname()}"
    child = spawn("worker-storeless", recur_argv("worker", "short", "-n", node,
                                                 "--without-mingle"),
                  tmp_path, environment(RECUR_DATABASE_URL=(
                      f"postgresql+psycopg://postgres@127.0.0.1:{port}/test")),
                  cwd=services.ROOT)
    try:
        wait_for_worker(celery_app, child, node)
    finally:
        child.stop()
