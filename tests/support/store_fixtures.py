"""Fixtures for the due-jobs store: a migrated SQLite file and PostgreSQL schema per run.

The schema is built once per test session (by the real migrations); each test
gets a fresh copy: SQLite copies the migrated file, PostgreSQL empties the
run's own schema.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from scheduler.store import DueStore, close_stores
from scheduler.store.connection import make_engine
from scheduler.store.migrate import upgrade
from tests.support import services

PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"
PG_SCHEMA = f"recur_test_{services.RUN_ID}"
PG_URL = f"postgresql+psycopg://postgres@127.0.0.1:5432/test?options=-csearch_path%3D{PG_SCHEMA}"


def run_pg(sql: str) -> None:
    """Run ``sql`` on the shared PostgreSQL (database ``test``), autocommit."""
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(sql)


@contextmanager
def own_pg_schema(prefix: str) -> Iterator[tuple[str, str]]:
    """A migrated PostgreSQL schema of one test's own and its store URL: for a test that
    changes the schema itself (its statistics, its indexes, its version); dropped after."""
    schema = f"{prefix}_{uuid.uuid4().hex[:8]}"
    run_pg(f"CREATE SCHEMA {schema}")
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/test?options=-csearch_path%3D{schema}"
    try:
        engine = make_engine(url)
        upgrade(engine)
        engine.dispose()
        yield schema, url
    finally:
        run_pg(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """This run's own migrated PostgreSQL schema; dropped at the end of the run."""
    services.ensure_services()
    run_pg(f"DROP SCHEMA IF EXISTS {PG_SCHEMA} CASCADE")
    run_pg(f"CREATE SCHEMA {PG_SCHEMA}")
    engine = make_engine(PG_URL)
    upgrade(engine)
    engine.dispose()
    yield PG_URL
    run_pg(f"DROP SCHEMA IF EXISTS {PG_SCHEMA} CASCADE")


@pytest.fixture
def own_pg_database() -> Iterator[str]:
    """A migrated store in a PostgreSQL database of its own (not a schema of
    ``test``), for a test that reads per-database server views (pg_stat_activity)."""
    name = f"recur_own_{services.RUN_ID}"
    run_pg(f"DROP DATABASE IF EXISTS {name}")
    run_pg(f"CREATE DATABASE {name}")
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    yield url
    run_pg(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite file that each test copies."""
    path = tmp_path_factory.mktemp("store") / "template.sqlite3"
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine)
    engine.dispose()
    return path


def empty_pg(url: str) -> None:
    run_pg(f"TRUNCATE {PG_SCHEMA}.due_jobs, {PG_SCHEMA}.due_counters, {PG_SCHEMA}.bucket_pauses, "
        f"{PG_SCHEMA}.due_set_aside")


@pytest.fixture
def sqlite_url(sqlite_template: Path, tmp_path: Path) -> str:
    """A fresh migrated SQLite store for this test."""
    path = tmp_path / "due.sqlite3"
    shutil.copy(sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture
def fresh_pg_url(pg_url: str) -> str:
    """This run's PostgreSQL schema, emptied for this test."""
    empty_pg(pg_url)
    return pg_url


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest) -> str:
    """A fresh store URL, once for SQLite and once for PostgreSQL."""
    name = "sqlite_url" if request.param == "sqlite" else "fresh_pg_url"
    return str(request.getfixturevalue(name))


@pytest.fixture
def store(store_url: str) -> Iterator[DueStore]:
    """A fresh, migrated due-jobs store (SQLite and PostgreSQL)."""
    s = DueStore.open(store_url)
    yield s
    s.close()


@pytest.fixture
def use_store(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    """Point this process's settings (and so apply_async) at a store URL for one test."""
    from config.settings import settings

    def use(url: str) -> None:
        monkeypatch.setenv("RECUR_DATABASE_URL", url)
        settings.cache_clear()

    yield use
    close_stores()
    monkeypatch.undo()
    settings.cache_clear()


SchedulerFactory = Callable[..., Any]


@pytest.fixture
def store_in_use(store_url: str, use_store: Callable[[str], None]) -> Iterator[DueStore]:
    """The store the app's tasks use for this test, opened for the test to read."""
    use_store(store_url)
    store = DueStore.open(store_url)
    yield store
    store.close()


@pytest.fixture
def start_scheduler(live_services: None, tmp_path: Path) -> Iterator[SchedulerFactory]:
    """Start real ``recur scheduler`` processes with extra RECUR_* env; stopped at the end."""
    from tests.support.processes import recur_argv, spawn

    started: list[Any] = []

    def start(env: dict[str, str], name: str = "scheduler") -> Any:
        # DEBUG: tests watch the per-pass lines (INFO has one summary a minute).
        full = {**os.environ, **services.test_environment(), "RECUR_LOG_LEVEL": "DEBUG", **env}
        child = spawn(f"{name}-{len(started)}", recur_argv("scheduler"), tmp_path / "logs",
                      full, cwd=services.ROOT)
        started.append(child)
        return child

    yield start
    for child in started:
        child.stop()
