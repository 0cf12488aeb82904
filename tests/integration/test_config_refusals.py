"""Bad and hostile configuration, through the real ``recur`` command: each refusal is one
``recur: …`` line naming the variable, exit code 2, no traceback, and no secret printed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.integration.test_cli_errors import error_lines, run_recur

pytestmark = pytest.mark.services


def one_refusal(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    lines = error_lines(result)
    assert len(lines) == 1 and lines[0].startswith("recur: "), lines
    return lines[0]


PLACEHOLDERS = {
    "RECUR_BROKER_URL": "amqp://recur:change-me-rabbit@127.0.0.1:5672//",
    "RECUR_REDIS_URL": "redis://:change-me-redis@127.0.0.1:6379/0",
    "RECUR_DATABASE_URL": "postgresql+psycopg://recur:change-me-postgres@127.0.0.1/recur",
    "RECUR_RESULT_BACKEND": "redis://127.0.0.1:6379/1?password=change-me-results",
    "RECUR_FLOWER_PASSWORD": "change-me-flower",
    "RECUR_FLOWER_BROKER_API": "http://recur:change-me-rabbit@127.0.0.1:15672/api/",
}


@pytest.mark.parametrize("var", list(PLACEHOLDERS))
@pytest.mark.parametrize("command", [["status"], ["worker", "short"], ["scheduler"]])
def test_a_placeholder_password_stops_every_command_at_start(
        var: str, command: list[str], tmp_path: Path) -> None:
    line = one_refusal(run_recur(command, {var: PLACEHOLDERS[var]}, tmp_path))
    assert line.startswith(f"recur: {var}=") and "placeholder password" in line
    assert "change-me-" not in line
    assert not (tmp_path / "recur.sqlite3").exists()


def test_the_example_env_files_placeholders_are_refused_by_flower(tmp_path: Path) -> None:
    line = one_refusal(run_recur(["flower"], {"RECUR_FLOWER_USER": "ops",
                                              "RECUR_FLOWER_PASSWORD": "change-me-flower"},
                                 tmp_path))
    assert "RECUR_FLOWER_PASSWORD" in line and "change-me-flower" not in line


@pytest.mark.parametrize(("user", "password", "named"), [
    ("ops", "first,second", "RECUR_FLOWER_PASSWORD"),
    ("ops", ",", "RECUR_FLOWER_PASSWORD"),
    ("ops", "pw,", "RECUR_FLOWER_PASSWORD"),
    ("ops,admin", "pw", "RECUR_FLOWER_USER"),
    ("ops:admin", "pw", "RECUR_FLOWER_USER"),
    ("ops", "pässwörd", "RECUR_FLOWER_PASSWORD"),
    ("ops", "tab\there", "RECUR_FLOWER_PASSWORD"),
])
def test_flower_credentials_flower_would_misread_are_refused(
        user: str, password: str, named: str, tmp_path: Path) -> None:
    result = run_recur(["flower"], {"RECUR_FLOWER_USER": user, "RECUR_FLOWER_PASSWORD": password},
                       tmp_path)
    line = one_refusal(result)
    assert line.startswith(f"recur: {named} must ")
    assert password not in result.stderr or password == ","


def test_flower_without_credentials_still_refuses(tmp_path: Path) -> None:
    line = one_refusal(run_recur(["flower"], {}, tmp_path))
    assert "RECUR_FLOWER_USER and RECUR_FLOWER_PASSWORD must be set" in line


def test_flower_refuses_a_second_login_passed_as_an_option(tmp_path: Path) -> None:
    result = run_recur(["flower", "--basic-auth=anyone:anything"],
                       {"RECUR_FLOWER_USER": "ops", "RECUR_FLOWER_PASSWORD": "s3cret-test"},
                       tmp_path)
    line = one_refusal(result)
    assert "--basic-auth is not passed on" in line


@pytest.mark.parametrize(("env", "named"), [
    ({"RECUR_LEASE_SECONDS": "nan"}, "RECUR_LEASE_SECONDS='nan': lease_seconds must be a finite"),
    ({"RECUR_LOCK_TTL": "inf"}, "RECUR_LOCK_TTL='inf': lock_ttl must be a finite"),
    ({"RECUR_DRAIN_BATCH": "100000000"}, "drain_batch must be at most 100000"),
    ({"RECUR_KEY_PREFIX": "recur:*"}, "RECUR_KEY_PREFIX='recur:*': key_prefix may hold only"),
    ({"RECUR_LOW_WATERMARK": "5000"}, "RECUR_LOW_WATERMARK=5000 is above"),
    ({"RECUR_METRICS_USER": "prom"}, "RECUR_METRICS_USER and RECUR_METRICS_PASSWORD"),
    ({"RECUR_MIN_EVERY": "0"}, "RECUR_MIN_EVERY='0': min_every must be positive"),
])
def test_a_bad_number_or_contradiction_stops_a_command(env: dict[str, str], named: str,
                                                       tmp_path: Path) -> None:
    assert named in one_refusal(run_recur(["status"], env, tmp_path))


def test_a_bucket_file_with_nan_stops_a_command(tmp_path: Path) -> None:
    path = tmp_path / "buckets.toml"
    path.write_text("[buckets.a]\nsoft_time_limit = nan\ntime_limit = 15\nconcurrency = 2\n"
                    'pool = "prefork"\n')
    line = one_refusal(run_recur(["status"], {"RECUR_BUCKETS_FILE": str(path)}, tmp_path))
    assert line == f"recur: {path}: bucket 'a': soft_time_limit: must be a finite number, got nan"


def test_settings_prints_bounds_and_secrets_masked(tmp_path: Path) -> None:
    env = {"RECUR_REDIS_URL": "redis://:hunter2@127.0.0.1:6379/0?password=hunter2",
           "RECUR_FLOWER_USER": "ops", "RECUR_FLOWER_PASSWORD": "hunter2",
           "RECUR_METRICS_USER": "prom", "RECUR_METRICS_PASSWORD": "hunter2"}
    result = run_recur(["settings"], env, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "hunter2" not in result.stdout + result.stderr
    assert "    set: redis://:***@127.0.0.1:6379/0?password=***" in result.stdout
    assert "RECUR_FLOWER_PASSWORD=\n" in result.stdout and "    set: ***" in result.stdout
    assert "Bounds: above 0, at most 604800." in result.stdout  # RECUR_LEASE_SECONDS
    assert "RECUR_BROKER_URL=amqp://guest:***@127.0.0.1:5672//" in result.stdout


def test_settings_lists_every_out_of_bounds_variable(tmp_path: Path) -> None:
    result = run_recur(["settings"], {"RECUR_LEASE_SECONDS": "nan", "RECUR_LOCK_TTL": "inf",
                                      "RECUR_FLOWER_PASSWORD": "change-me-flower"}, tmp_path)
    assert result.returncode == 2
    bad = error_lines(result)
    assert [line.split("=")[0] for line in bad] == [
        "recur: RECUR_FLOWER_PASSWORD", "recur: RECUR_LEASE_SECONDS", "recur: RECUR_LOCK_TTL"]
