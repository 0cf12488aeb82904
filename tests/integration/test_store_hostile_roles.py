"""A PostgreSQL store reached with the wrong role or search_path: every command and the
worker say what is wrong in one ``recur: ...`` line (exit code 2), never an SQL dump and
never "run `recur db upgrade`" where that cannot help; ``recur doctor`` fails a read-only
store; a worker that cannot write the store refuses to start instead of dead-lettering
every stored job's message."""

from __future__ import annotations

import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from config.errors import StoreUnavailable
from scheduler.store import DueStore
from scheduler.store.records import Claimed, Job
from scheduler.store.worker_store import WorkerStore
from tests.support.processes import recur_argv
from tests.support.refusals import refusal_line, service_environment
from tests.support.store_fixtures import PG_DSN, PG_SCHEMA, empty_pg, run_pg

pytestmark = pytest.mark.services

Role = Callable[..., str]


def url_of(role: str, schema: str = PG_SCHEMA) -> str:
    return f"postgresql+psycopg://{role}@127.0.0.1:5432/test?options=-csearch_path%3D{schema}"


def recur(url: str, *argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(recur_argv(*argv), env=service_environment(RECUR_DATABASE_URL=url),
                          cwd=cwd, capture_output=True, text=True, timeout=60)


@pytest.fixture
def role(pg_url: str) -> Iterator[Role]:
    """Make a login role on this run's schema: ``grants`` on its tables, ``settings`` its
    own; every role made is dropped afterwards."""
    made: list[str] = []

    def make(grants: str = "ALL", **settings: str) -> str:
        name = f"recur_hostile_{uuid.uuid4().hex[:8]}"
        made.append(name)
        run_pg(f"CREATE ROLE {name} LOGIN")
        run_pg(f"GRANT USAGE ON SCHEMA {PG_SCHEMA} TO {name}")
        run_pg(f"GRANT {grants} ON ALL TABLES IN SCHEMA {PG_SCHEMA} TO {name}")
        for setting, value in settings.items():
            run_pg(f"ALTER ROLE {name} SET {setting} = {value}")
        return name

    yield make
    for name in made:
        run_pg(f"DROP OWNED BY {name}")
        run_pg(f"DROP ROLE {name}")


@pytest.mark.parametrize("argv", [("db", "upgrade"), ("jobs", "list", "--user", "u1"),
                                  ("worker", "short")])
def test_a_search_path_naming_no_schema_is_named(live_services: None, pg_url: str,
                                                 tmp_path: Path, argv: tuple[str, ...]) -> None:
    missing = f"recur_nowhere_{uuid.uuid4().hex[:8]}"
    line = refusal_line(recur(url_of("postgres", missing), *argv, cwd=tmp_path))
    assert f"search_path ({missing}) names no schema this role can use" in line


@pytest.fixture
def read_only_url(role: Role) -> str:
    """A role whose sessions are read-only, as on a hot standby."""
    return url_of(role(default_transaction_read_only="on"))


def test_a_refused_write_is_one_line_naming_its_cause(live_services: None, read_only_url: str,
                                                      tmp_path: Path) -> None:
    line = refusal_line(recur(read_only_url, "bucket", "pause", "medium", cwd=tmp_path))
    assert line.endswith("read-only transaction"), line  # the cause, not the SQL text


def test_doctor_fails_a_read_only_store(live_services: None, read_only_url: str,
                                        tmp_path: Path) -> None:
    doctor = recur(read_only_url, "doctor", cwd=tmp_path)
    assert doctor.returncode == 2 and "FAIL  postgres writable: no:" in doctor.stdout


def test_a_worker_refuses_a_read_only_store(live_services: None, read_only_url: str,
                                            tmp_path: Path) -> None:
    assert "is read-only" in refusal_line(recur(read_only_url, "worker", "short", cwd=tmp_path))


def test_a_worker_refuses_a_role_that_may_not_write(live_services: None, role: Role,
                                                    tmp_path: Path) -> None:
    url = url_of(role(grants="SELECT"))
    line = refusal_line(recur(url, "worker", "short", cwd=tmp_path))
    assert "may not INSERT, UPDATE and DELETE on due_jobs" in line


@pytest.mark.parametrize(("query", "cause"), [
    ("options=-cgarbage", "-c garbage requires a value"),
    ("sslmode=require", "server does not support SSL"),  # this server has no SSL
])
def test_the_scheduler_refuses_a_url_the_server_refuses(live_services: None, pg_url: str,
                                                        tmp_path: Path, query: str,
                                                        cause: str) -> None:
    """Not an outage to wait out forever (a server that is down still is one)."""
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/test?{query}"
    line = refusal_line(recur(url, "scheduler", cwd=tmp_path))
    assert cause in line and "fix RECUR_DATABASE_URL" in line


def test_a_dispatch_outlasts_the_roles_idle_in_transaction_timeout(role: Role,
                                                                   pg_url: str) -> None:
    """The dispatch keeps its rows locked while the broker confirms; a role's 100 ms
    idle_in_transaction_session_timeout ended that session (the scheduler exited with the
    batch already published, to run again as duplicates)."""
    empty_pg(pg_url)
    now = datetime.now(UTC)
    store = DueStore.open(url_of(role(idle_in_transaction_session_timeout="100")))
    try:
        store.schedule([Job(f"idle-{n}", "t", "short", "{}", now) for n in range(3)], now)
        confirmed = threading.Event()

        def slow_broker(rows: list[Claimed]) -> None:
            confirmed.wait(0.5)  # the broker's confirms take longer than the timeout
        assert store.dispatch("short", 10, now, now + timedelta(minutes=5), slow_broker) == 3
    finally:
        store.close()


def test_a_reschedule_that_times_out_waiting_for_a_lock_is_one_outage_line(
        role: Role, pg_url: str) -> None:
    """A role's 10 ms lock_timeout against a table another session holds: an outage the run
    rides out (StoreUnavailable), said in one line, not the statement psycopg quotes."""
    store = WorkerStore(url_of(role(lock_timeout="10")))
    now = datetime.now(UTC)
    try:
        with psycopg.connect(PG_DSN) as holder:
            holder.execute(f"LOCK TABLE {PG_SCHEMA}.due_jobs IN ACCESS EXCLUSIVE MODE")
            with pytest.raises(StoreUnavailable) as caught:
                store.reschedule("k", 1, now, now)
        assert store.reschedule("k", 1, now, now) is False  # no such row: but it ran
        # The connection was sound: not counted broken (the settle journal would replay
        # its writes and log that the database restarted or a connection broke).
        assert store._run().broken == 0
    finally:
        store.close()
    assert str(caught.value).endswith("canceling statement due to lock timeout"), caught.value
