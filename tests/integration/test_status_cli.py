"""``recur status`` tells the truth: dead counts from the dead-letter queues, exit code 2
when a service cannot be read, missing queues as one line, no file created by reading."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from kombu import Connection

from tasks.flow import parse_rate
from tasks.flow.limiter import take
from tests.integration.test_cli_errors import CLOSED, error_lines, run_recur
from tests.support import services

pytestmark = pytest.mark.services


def status(env: dict[str, str], cwd: Path) -> tuple[subprocess.CompletedProcess[str],
                                                    dict[str, Any]]:
    result = run_recur(["status", "--json"], env, cwd)
    assert "Traceback" not in result.stderr
    return result, json.loads(result.stdout)


def run_python(args: list[str], env: dict[str, str], cwd: Path
               ) -> subprocess.CompletedProcess[str]:
    """This interpreter with ``args``, as ``run_recur`` runs ``recur`` (project on the path)."""
    full = {**os.environ, "PYTHONPATH": str(services.ROOT)}
    full = {k: v for k, v in full.items() if not k.startswith("RECUR_")}
    full.update({**services.test_environment(), **env})
    return subprocess.run([sys.executable, *args], env=full, cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def put_dead(broker: Connection, queue: str, count: int) -> None:
    with broker.channel() as channel:
        for i in range(count):
            channel.basic_publish(channel.prepare_message(f"dead-{i}".encode()), exchange="",
                                  routing_key=queue)


def test_healthy_status_exits_0_and_counts_the_dead_letter_queues(
        broker: Connection, fresh_pg_url: str, tmp_path: Path) -> None:
    put_dead(broker, "short.dead", 2)
    put_dead(broker, "long.dead", 1)
    result, doc = status({"RECUR_DATABASE_URL": fresh_pg_url}, tmp_path)
    assert result.returncode == 0, result.stderr
    dead = {row["bucket"]: row["dead_queue"] for row in doc["buckets"]}
    assert dead == {"short": 2, "medium": 0, "long": 1, "io": 0}
    assert doc["errors"] == [] and doc["notes"] == []
    table = run_recur(["status"], {"RECUR_DATABASE_URL": fresh_pg_url}, tmp_path)
    short = next(line for line in table.stdout.splitlines() if line.startswith("short"))
    assert short.split()[7] == "2"  # the dead column


@pytest.mark.parametrize(("env", "names"), [
    ({"RECUR_BROKER_URL": f"amqp://guest:wrong@127.0.0.1:5672/{services.VHOST}"},
     "ACCESS_REFUSED"),
    ({"RECUR_BROKER_URL": f"amqp://guest:guest@127.0.0.1:{CLOSED}/{services.VHOST}"},
     "broker"),
    ({"RECUR_REDIS_URL": f"redis://127.0.0.1:{CLOSED}/0"}, "Redis"),
    ({"RECUR_DATABASE_URL": "postgresql+psycopg://postgres@127.0.0.1:5432/no_such_db_i15"},
     "no_such_db_i15"),
], ids=["broker refuses credentials", "broker down", "redis down", "database missing"])
def test_a_service_that_cannot_be_read_makes_exit_code_2(
        env: dict[str, str], names: str, live_services: None, fresh_pg_url: str,
        tmp_path: Path) -> None:
    result, doc = status({"RECUR_DATABASE_URL": fresh_pg_url, **env}, tmp_path)
    assert result.returncode == 2
    assert len(doc["errors"]) == 1 and names in doc["errors"][0]
    assert [line for line in error_lines(result)] == [f"recur: {doc['errors'][0]}"]
    assert "wrong@" not in result.stderr


def test_reading_never_creates_a_database_file(live_services: None, tmp_path: Path) -> None:
    result, doc = status({"RECUR_DATABASE_URL": "sqlite:///recur.sqlite3"}, tmp_path)
    assert result.returncode == 2
    assert "recur db upgrade" in doc["errors"][0]
    assert list(tmp_path.iterdir()) == []


def test_missing_queues_are_one_readable_line(fresh_pg_url: str, tmp_path: Path,
                                              live_services: None) -> None:
    with services.scratch_vhost("empty") as vhost:
        result, doc = status({"RECUR_DATABASE_URL": fresh_pg_url,
                              "RECUR_BROKER_URL": f"amqp://guest:guest@127.0.0.1:5672/{vhost}"},
                             tmp_path)
    assert result.returncode == 0
    lines = error_lines(result)
    assert len(lines) == 1 and "recur topology" in lines[0] and "short.dead" in lines[0]
    assert "NOT_FOUND" not in result.stderr
    assert all(row["queue_depth"] is None for row in doc["buckets"])


def test_status_shows_the_jobs_a_rate_limit_deferred_per_bucket(
        redis_client: redis.Redis, fresh_pg_url: str, tmp_path: Path) -> None:
    rate, key = parse_rate("1/s"), f"status-{uuid.uuid4().hex[:8]}"
    assert take(redis_client, services.KEY_PREFIX, key, "j1", "short", rate).allowed
    assert not take(redis_client, services.KEY_PREFIX, key, "j2", "short", rate).allowed
    env = {"RECUR_DATABASE_URL": fresh_pg_url}
    result, doc = status(env, tmp_path)
    assert result.returncode == 0, result.stderr
    short = doc["rate_limited"]["short"]
    assert short["deferred"] >= 1 and short["waiting"] >= 1
    table = run_recur(["status"], env, tmp_path)
    line = next(s for s in table.stdout.splitlines() if s.startswith("rate limited:"))
    found = re.search(r"short waiting=(\d+) deferred=(\d+)", line)
    assert found is not None and int(found[1]) >= 1 and int(found[2]) >= 1


def test_status_runs_without_the_tasks_package_and_reads_the_same(
        fresh_pg_url: str, tmp_path: Path, live_services: None) -> None:
    """``recur status`` does not import ``tasks`` (the Celery app: most of its wall time
    was imports), nor Celery, prometheus_client, OpenTelemetry or PyYAML, yet answers as
    the command on the full ``recur`` group does."""
    unused = "{'tasks', 'celery', 'prometheus_client', 'opentelemetry', 'yaml'}"
    probe = ("import sys\nfrom config.entry import main\ntry:\n    main(sys.argv[1:])\n"
             "except SystemExit:\n    pass\n"
             f"print('LOADED', sorted(m for m in sys.modules if sys.modules[m] is not None"
             f" and m.split('.')[0] in {unused}), file=sys.stderr)\n")
    env = {"RECUR_DATABASE_URL": fresh_pg_url}
    alone = run_python(["-c", probe, "status", "--json"], env, tmp_path)
    loaded = next(line for line in alone.stderr.splitlines() if line.startswith("LOADED"))
    assert loaded == "LOADED []", loaded
    assert alone.returncode == 0, alone.stderr
    full = run_python(["-m", "tasks.cli", "status", "--json"], env, tmp_path)
    mine, theirs = json.loads(alone.stdout), json.loads(full.stdout)
    for doc in (mine, theirs):
        doc.pop("store_seconds")
    assert mine == theirs and full.returncode == 0, full.stderr
    helps = [run_python(args, env, tmp_path).stdout for args in
             (["-m", "config.entry", "status", "--help"],
              ["-m", "tasks.cli", "status", "--help"])]
    assert "--exact" in helps[0] and helps[0] == helps[1].replace("tasks.cli", "recur")
