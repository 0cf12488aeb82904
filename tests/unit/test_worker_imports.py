"""A worker imports only what it runs (docs/operations.md#memory).

Every module a worker process imports costs memory in it and in each prefork child:
the seed job (PySpark), the migrations (alembic, Mako), the resequencer's HTTP client
(httpx) and Celery's command-line extras (Pygments, Flower, prompt_toolkit) are
imported by the commands and workers that use them, never by ``import tasks``. Each
check runs in a fresh interpreter and reads its ``sys.modules``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NEVER = {"pyspark", "alembic", "mako", "pygments", "httpx", "httpcore"}
#: Celery's other commands and plugins, which ``recur worker`` (config/worker_entry.py)
#: leaves out.
CELERY_CLI_EXTRAS = {"flower", "tornado", "prompt_toolkit", "click_repl", "yaml"}
#: What ``celery -A tasks worker`` loads once the app is found: the app and recur's
#: tasks, the Worker and consumer classes it names, both pools the buckets use, the
#: AMQP transport and the Redis result backend.
WORKER_LOADS = """
from tasks.app import app
import tasks, tasks.worker, tasks.consumer, tasks.revoke
import celery.concurrency.prefork, celery.concurrency.thread, celery.worker.consumer
import celery.app.trace, kombu.transport.pyamqp
app.Worker, app.backend, app.control
"""


#: A PostgreSQL store: a worker settles its rows on psycopg alone (no SQLAlchemy).
PG_URL = "postgresql+psycopg://127.0.0.1/test"


def imported_roots(code: str, database_url: str = PG_URL) -> set[str]:
    """The top-level packages in ``sys.modules`` after ``code`` ran in a fresh interpreter."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted({{m.split('.')[0] for m in "\
            f"sys.modules}})))"
    env = {**os.environ, "RECUR_DATABASE_URL": database_url}
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=True, env=env)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.timeout(240)
def test_what_a_worker_loads_imports_no_seed_migration_or_http_code() -> None:
    loaded = imported_roots(WORKER_LOADS)
    assert {"celery", "kombu", "redis", "psycopg"} <= loaded  # it did load
    assert loaded & (NEVER | {"sqlalchemy"}) == set()


@pytest.mark.timeout(240)
def test_a_worker_without_metrics_or_tracing_imports_neither_library() -> None:
    # Lazy metrics (config/lazy_metrics.py); redis-py's OpenTelemetry metrics kept out
    # while it loads (routing/redis_client.py). Both load when configured.
    # Nor the metrics endpoint's HTTP server (wsgiref, http.server: ~1 MB).
    loaded = imported_roots("import tasks\n" + WORKER_LOADS)
    assert "redis" in loaded
    assert loaded & {"prometheus_client", "opentelemetry", "wsgiref"} == set()


@pytest.mark.timeout(240)
def test_a_worker_on_postgresql_settles_without_sqlalchemy(pg_url: str) -> None:
    # A run's token check, reschedule, finish and stored calls (scheduler/store/
    # worker_store.py) open the store on psycopg alone: ~12 MB less per process.
    loaded = imported_roots("import tasks\nfrom tasks.settle import get_worker_store\n"
                            f"get_worker_store({pg_url!r}).live_dispatch('no-such-key')",
                            database_url=pg_url)
    assert "psycopg" in loaded and "sqlalchemy" not in loaded


@pytest.mark.timeout(240)
def test_a_worker_on_sqlite_opens_the_full_store(sqlite_url: str) -> None:
    loaded = imported_roots("import tasks\nfrom tasks.settle import get_worker_store\n"
                            f"get_worker_store({sqlite_url!r}).live_dispatch('no-such-key')",
                            database_url=sqlite_url)
    assert "sqlalchemy" in loaded


@pytest.mark.timeout(240)
def test_recur_worker_runs_celerys_worker_command_without_the_rest_of_its_cli() -> None:
    loaded = imported_roots("from config.worker_entry import prepare\n"
                            "prepare(['-A', 'tasks', 'worker'])\n" + WORKER_LOADS)
    assert loaded & (NEVER | CELERY_CLI_EXTRAS) == set()


def test_recur_worker_execs_the_slim_entry_point_with_the_buckets_profile() -> None:
    from tasks.cli.params import bucket_arg
    from tasks.cli.worker import worker_argv

    argv = worker_argv(bucket_arg(None, None, "short"), ("--without-gossip",))
    assert argv[1:7] == ["-m", "config.worker_entry", "-A", "tasks", "worker", "-Q"]
    assert argv[argv.index("-P") + 1] == "prefork" and argv[-1] == "--without-gossip"


def test_the_schema_check_knows_the_head_alembic_knows() -> None:
    from scheduler.store.migrate import alembic_head
    from scheduler.store.schema_check import head_revision

    assert head_revision() == alembic_head()


def test_what_the_worker_leaves_out_stays_importable_for_task_code() -> None:
    loaded = imported_roots("from config.worker_entry import prepare\n"
                            "prepare(['-A', 'tasks', 'worker'])\n"
                            "import pygments.lexers, yaml")
    assert {"pygments", "yaml"} <= loaded


def test_a_bad_worker_entry_command_line_is_one_line() -> None:
    out = subprocess.run([sys.executable, "-m", "config.worker_entry", "worker"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stderr.strip().startswith("recur: usage:")
    assert "Traceback" not in out.stderr
