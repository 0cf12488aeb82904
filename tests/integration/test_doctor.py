"""``recur doctor`` as a real subprocess against the real services, and against services set
up wrong on purpose (a private Redis of the test's own): one line per check, exit code 2 on
any FAIL, never a traceback.

What the shared test services are: the local Redis runs with ``appendonly no`` (a warn,
a FAIL with RECUR_STRICT=1, as docs/security.md says) and the shared PostgreSQL may have
autovacuum off (a warn). Each test reads the real setting and expects what the doc says of it.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis

from tests.support import services
from tests.support.private_redis import PrivateRedis
from tests.support.processes import recur_argv
from tests.support.store_fixtures import PG_DSN

pytestmark = pytest.mark.services

LINE = re.compile(r"^(ok  |warn|FAIL)  [\w .-]+: \S")


def run_doctor(env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("RECUR_")}
    full.update({**services.test_environment(), **env})
    return subprocess.run(recur_argv("doctor"), env=full, cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def lines(result: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """Check name -> its whole line; every stdout line is a check or the summary."""
    found = {}
    out = [line for line in result.stdout.splitlines() if line.strip()]
    assert out[-1].startswith("doctor: "), result.stdout
    for line in out[:-1]:
        assert LINE.match(line), f"not a check line: {line!r}\n{result.stdout}"
        found[line[6:].split(":", 1)[0]] = line
    assert "Traceback" not in result.stdout + result.stderr
    return found


def level(found: dict[str, str], name: str) -> str:
    return found[name][:4].strip()


def shared_redis_config(name: str) -> str:
    client = redis.Redis.from_url(services.REDIS_URL, decode_responses=True)
    return str(client.config_get(name)[name])


def assert_exit_follows_the_lines(result: subprocess.CompletedProcess[str],
                                  found: dict[str, str]) -> None:
    failed = [name for name in found if level(found, name) == "FAIL"]
    assert result.returncode == (2 if failed else 0), result.stdout + result.stderr
    if failed:
        assert result.stderr.strip().splitlines()[-1] == (
            f"recur: doctor: {len(failed)} check(s) failed: {', '.join(failed)}")


@pytest.fixture
def private_redis(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[PrivateRedis]:
    """A private Redis started with the test's extra arguments (``@pytest.mark.parametrize``
    of ``redis_args`` or none)."""
    extra = getattr(request, "param", ())
    server = PrivateRedis(tmp_path, extra=tuple(extra))
    server.start()
    try:
        yield server
    finally:
        server.stop()
        server.client.close()


def test_against_the_test_services(live_services: None, sqlite_url: str,
                                   tmp_path: Path) -> None:
    result = run_doctor({"RECUR_DATABASE_URL": sqlite_url}, tmp_path)
    found = lines(result)
    for name in ("rabbitmq", "rabbitmq version", "rabbitmq queues", "redis", "database",
                 "schema", "rabbitmq password", "redis password", "database password"):
        assert level(found, name) == "ok", found[name]
    assert "10 quorum queues" in found["rabbitmq queues"]
    aof = shared_redis_config("appendonly")
    assert level(found, "redis appendonly") == ("ok" if aof == "yes" else "warn")
    if aof != "yes":
        assert "RECUR_STRICT=1 makes this a failure" in found["redis appendonly"]
    assert level(found, "redis maxmemory-policy") == (
        "ok" if shared_redis_config("maxmemory-policy") == "noeviction" else "FAIL")
    assert_exit_follows_the_lines(result, found)


def test_strict_makes_a_missing_aof_a_failure(live_services: None, sqlite_url: str,
                                              tmp_path: Path) -> None:
    result = run_doctor({"RECUR_DATABASE_URL": sqlite_url, "RECUR_STRICT": "1"}, tmp_path)
    found = lines(result)
    wanted = "ok" if shared_redis_config("appendonly") == "yes" else "FAIL"
    assert level(found, "redis appendonly") == wanted
    assert_exit_follows_the_lines(result, found)


def test_postgresql_store_settings(live_services: None, pg_url: str, tmp_path: Path) -> None:
    result = run_doctor({"RECUR_DATABASE_URL": pg_url}, tmp_path)
    found = lines(result)
    with psycopg.connect(PG_DSN) as conn:
        sync, autovacuum = (str(conn.execute(f"SHOW {name}").fetchone()[0])  # type: ignore[index]
                            for name in ("synchronous_commit", "autovacuum"))
    assert level(found, "postgres synchronous_commit") == ("FAIL" if sync == "off" else "ok")
    assert level(found, "postgres autovacuum") == ("ok" if autovacuum == "on" else "warn")
    assert level(found, "schema") == "ok" and "this code's newest" in found["schema"]
    assert_exit_follows_the_lines(result, found)


@pytest.mark.parametrize("private_redis", [("--maxmemory-policy", "allkeys-lru")],
                         indirect=True)
def test_an_evicting_redis_fails_naming_the_setting(
        live_services: None, sqlite_url: str, private_redis: PrivateRedis,
        tmp_path: Path) -> None:
    result = run_doctor({"RECUR_DATABASE_URL": sqlite_url, "RECUR_REDIS_URL": private_redis.url},
                        tmp_path)
    found = lines(result)
    assert result.returncode == 2
    line = found["redis maxmemory-policy"]
    assert line.startswith("FAIL  redis maxmemory-policy: is allkeys-lru, recur needs noeviction")
    assert "CONFIG SET maxmemory-policy noeviction" in line
    assert level(found, "redis appendonly") == "ok"  # the private one has AOF
    assert "recur: doctor: 1 check(s) failed: redis maxmemory-policy" in result.stderr


@pytest.mark.parametrize("private_redis", [("--rename-command", "CONFIG", "")], indirect=True)
def test_config_disabled_reads_the_settings_from_info(
        live_services: None, sqlite_url: str, private_redis: PrivateRedis,
        tmp_path: Path) -> None:
    result = run_doctor({"RECUR_DATABASE_URL": sqlite_url, "RECUR_REDIS_URL": private_redis.url},
                        tmp_path)
    found = lines(result)
    assert level(found, "redis maxmemory-policy") == "ok"
    assert level(found, "redis appendonly") == "ok"
    assert_exit_follows_the_lines(result, found)


@pytest.mark.parametrize("private_redis", [("--rename-command", "CONFIG", "",
                                            "--rename-command", "INFO", "")], indirect=True)
def test_settings_nobody_can_read_are_a_warning_not_a_crash(
        live_services: None, sqlite_url: str, private_redis: PrivateRedis,
        tmp_path: Path) -> None:
    result = run_doctor({"RECUR_DATABASE_URL": sqlite_url, "RECUR_REDIS_URL": private_redis.url,
                         "RECUR_STRICT": "1"}, tmp_path)
    found = lines(result)
    for name in ("redis maxmemory-policy", "redis appendonly"):
        assert level(found, name) == "warn"
        assert "cannot be read (CONFIG GET is refused" in found[name]
        assert "INFO is refused too" in found[name]
    assert level(found, "redis") == "ok"
    assert_exit_follows_the_lines(result, found)


def test_redis_that_wants_a_password(live_services: None, sqlite_url: str,
                                     private_redis: PrivateRedis, tmp_path: Path) -> None:
    private_redis.client.config_set("requirepass", "s3cret-pw")
    env = {"RECUR_DATABASE_URL": sqlite_url, "RECUR_REDIS_URL": private_redis.url}
    result = run_doctor(env, tmp_path)
    found = lines(result)
    assert result.returncode == 2
    assert found["redis"].startswith("FAIL  redis: ") and "RECUR_REDIS_URL" in found["redis"]
    assert "redis appendonly" not in found  # not asked of a Redis that let nobody in
    with_password = private_redis.url.replace("redis://", "redis://:s3cret-pw@")
    result = run_doctor({**env, "RECUR_REDIS_URL": with_password}, tmp_path)
    found = lines(result)
    assert level(found, "redis") == "ok" and level(found, "redis password") == "ok"
    assert "s3cret-pw" not in result.stdout + result.stderr
    assert "redis://:***@127.0.0.1" in found["redis"]


def test_services_down_each_fail_and_the_rest_is_still_checked(
        live_services: None, tmp_path: Path) -> None:
    closed = services.free_port()
    env = {"RECUR_BROKER_URL": f"amqp://guest:guest@127.0.0.1:{closed}//",
           "RECUR_DATABASE_URL": f"sqlite:///{tmp_path / 'never.sqlite3'}"}
    result = run_doctor(env, tmp_path)
    found = lines(result)
    assert result.returncode == 2
    assert found["rabbitmq"].startswith("FAIL  rabbitmq: cannot reach amqp://guest:***@")
    assert "rabbitmq queues" not in found
    assert found["database"].startswith("FAIL  database: ") and "recur db upgrade" in found[
        "database"]
    assert not (tmp_path / "never.sqlite3").exists()  # doctor creates nothing
    assert level(found, "redis") == "ok"
    assert "rabbitmq, database" in result.stderr


@pytest.mark.parametrize(("max_deliveries", "wanted"), [("5", "ok"), ("7", "FAIL")])
def test_without_the_management_api_queues_are_checked_by_declaring_them_again(
        live_services: None, sqlite_url: str, tmp_path: Path, max_deliveries: str,
        wanted: str) -> None:
    """The run's queues have delivery limit 4 (RECUR_MAX_DELIVERIES=5); a deployment set to
    7 would not get the limit it asks for: the queue keeps the one it was declared with.
    With no management API (a closed port), the broker's own refusal of a redeclare says so."""
    closed = services.free_port()
    result = run_doctor({"RECUR_DATABASE_URL": sqlite_url, "RECUR_MAX_DELIVERIES": max_deliveries,
                         "RECUR_FLOWER_BROKER_API": f"http://guest:guest@127.0.0.1:{closed}/api/"},
                        tmp_path)
    found = lines(result)
    line = found["rabbitmq queues"]
    assert level(found, "rabbitmq queues") == wanted, line
    assert "checked by declaring them again: the management API" in line
    if wanted == "FAIL":
        assert result.returncode == 2
        assert "inequivalent arg 'x-delivery-limit' for queue 'short'" in line
        assert "recur topology" in line


def test_a_placeholder_password_never_passes(live_services: None, sqlite_url: str,
                                             tmp_path: Path) -> None:
    result = run_doctor({"RECUR_DATABASE_URL": sqlite_url, "RECUR_FLOWER_USER": "ops",
                         "RECUR_FLOWER_PASSWORD": "change-me-flower"}, tmp_path)
    assert result.returncode == 2
    assert "placeholder" in result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("recur: ")


def management_api() -> None:
    """RabbitMQ's management plugin on 15672, enabled by the set-up script when it is off
    (as the Flower test does: the suite's broker has it)."""
    if not services.port_open(15672):
        subprocess.run([str(services.ROOT / "scripts" / "ensure-services.sh"), "management"],
                       capture_output=True, timeout=300)
    if not services.port_open(15672):
        pytest.fail("RabbitMQ's management API (15672) missing after "
                    "scripts/ensure-services.sh management", pytrace=False)


@pytest.mark.parametrize(("max_deliveries", "wanted"), [("5", "ok"), ("7", "FAIL")])
def test_queues_read_from_the_management_api(live_services: None, sqlite_url: str,
                                             tmp_path: Path, max_deliveries: str,
                                             wanted: str) -> None:
    management_api()
    result = run_doctor({"RECUR_DATABASE_URL": sqlite_url,
                         "RECUR_MAX_DELIVERIES": max_deliveries}, tmp_path)
    found = lines(result)
    line = found["rabbitmq queues"]
    assert level(found, "rabbitmq queues") == wanted, line
    assert "[read from the management API http://guest:***@127.0.0.1:15672/api/]" in line
    if wanted == "FAIL":
        assert "short has delivery limit 4, recur declares 6" in line
        assert result.returncode == 2


def test_missing_queues_are_reported_never_created(live_services: None, sqlite_url: str,
                                                   tmp_path: Path) -> None:
    from routing.broker import inspect_queues

    with services.scratch_vhost("doctor") as vhost:
        url = f"amqp://guest:guest@127.0.0.1:5672/{vhost}"
        closed = services.free_port()
        result = run_doctor({"RECUR_DATABASE_URL": sqlite_url, "RECUR_BROKER_URL": url,
                             "RECUR_FLOWER_BROKER_API": f"http://guest:guest@127.0.0.1:{closed}/"},
                            tmp_path)
        found = lines(result)
        assert level(found, "rabbitmq queues") == "warn"
        assert "not declared yet: short, short.dead" in found["rabbitmq queues"]
        assert set(inspect_queues(url, ["short", "short.dead", "outbound"]).values()) == {None}
