"""A worker checks its due-jobs store at start (tasks/signals.py): a store at another schema
revision would fail every stored job's run and spend each message's deliveries until it
is dead-lettered, so the worker does not start (one ``recur: ...`` line, exit code 2, as
the scheduler). No store at all is a warning; a store that cannot be reached is an
outage: the worker starts and its runs ride it out."""

from __future__ import annotations

import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import services
from tests.support.processes import recur_argv, spawn, wait_for_worker
from tests.support.refusals import refusal_line, service_environment
from tests.support.store_fixtures import run_pg

pytestmark = pytest.mark.services


environment = service_environment


@pytest.fixture
def unmigrated_pg_url() -> Iterator[str]:
    schema = f"recur_unmigrated_{uuid.uuid4().hex[:8]}"
    run_pg(f"CREATE SCHEMA {schema}")
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/test?options=-csearch_path%3D{schema}"
    finally:
        run_pg(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def assert_refused(result: subprocess.CompletedProcess[str]) -> None:
    assert "run `recur db upgrade`" in refusal_line(result)


@pytest.mark.parametrize("store", ["empty_sqlite", "unmigrated_pg"])
def test_a_worker_refuses_a_store_it_cannot_run_against(
        live_services: None, tmp_path: Path, store: str, request: pytest.FixtureRequest) -> None:
    if store == "empty_sqlite":
        (tmp_path / "due.sqlite3").touch()  # a file, but no schema in it
        url = f"sqlite:///{tmp_path / 'due.sqlite3'}"
    else:
        url = str(request.getfixturevalue("unmigrated_pg_url"))
    result = subprocess.run(recur_argv("worker", "short"), env=environment(
        RECUR_DATABASE_URL=url), cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert_refused(result)


def test_a_worker_without_any_store_starts_warns_and_creates_none(
        live_services: None, celery_app: Any, tmp_path: Path) -> None:
    """The default SQLite file not created yet: a worker that only runs published work
    needs no store; it says so in a WARNING line and does not create the file."""
    missing = tmp_path / "nowhere" / "due.sqlite3"
    node = f"nostore-{uuid.uuid4().hex[:6]}@{socket.gethostname()}"
    child = spawn("worker-nostore", recur_argv("worker", "short", "-n", node,
                                               "--without-mingle"),
                  tmp_path, environment(RECUR_DATABASE_URL=f"sqlite:///{missing}"),
                  cwd=services.ROOT)
    try:
        wait_for_worker(celery_app, child, node)
        assert "WARNING" in child.log() and str(missing) in child.log()
    finally:
        child.stop()
    assert not missing.parent.exists()


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
