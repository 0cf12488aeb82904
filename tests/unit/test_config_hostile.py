"""Hostile configuration: each bad value is one line naming it, from every entry point."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from config.bucketfile import MAX_FILE_BYTES, load_table
from config.errors import BucketsFileError
from config.settings import problems

ROOT = Path(__file__).resolve().parents[2]
BUCKET = ('soft_time_limit = 10\ntime_limit = 20\nconcurrency = 2\npool = "prefork"\n')


def _one_problem(env: dict[str, str]) -> str:
    _values, bad = problems(env)
    assert len(bad) == 1, bad
    return bad[0]


def test_a_nul_in_the_bucket_file_path_is_one_line() -> None:
    line = _one_problem({"RECUR_BUCKETS_FILE": "/tmp/a\0b"})
    assert "RECUR_BUCKETS_FILE" in line and "NUL" in line


@pytest.mark.parametrize("value", ["١٢", "２", "1\u0663"])
def test_numbers_in_other_scripts_are_refused(value: str) -> None:
    line = _one_problem({"RECUR_MAX_DELIVERIES": value})
    assert line.startswith("RECUR_MAX_DELIVERIES=") and "ASCII digits" in line


@pytest.mark.parametrize("name", ["RECUR_IMPORTS", "RECUR_RESEQ_STEPS",
                                  "RECUR_DESTINATION_OUTAGE_STATUSES",
                                  "RECUR_DESTINATION_POLICIES", "RECUR_KINDS"])
def test_a_huge_value_gives_a_short_line(name: str) -> None:
    line = _one_problem({name: "9" * 100_000})
    assert line.startswith(name) and len(line) < 600


def test_a_huge_bucket_file_path_gives_a_short_line() -> None:
    line = _one_problem({"RECUR_BUCKETS_FILE": "/tmp/" + "x" * 100_000})
    assert "cannot read it" in line and len(line) < 600


def test_control_characters_of_the_path_are_escaped(tmp_path: Path) -> None:
    line = _one_problem({"RECUR_BUCKETS_FILE": str(tmp_path / "a\x1b[2J")})
    assert "\x1b" not in line and "\\x1b[2J" in line


@pytest.mark.parametrize("path", ["/dev/null", "/dev/zero"])
def test_a_device_is_not_read_as_the_bucket_file(path: str) -> None:
    with pytest.raises(BucketsFileError, match="not a regular file"):
        load_table(path)


def test_a_huge_bucket_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "huge.toml"
    path.write_text("[buckets.a]\n" + BUCKET + "#" * MAX_FILE_BYTES + "\n")
    with pytest.raises(BucketsFileError, match=f"over {MAX_FILE_BYTES} bytes"):
        load_table(str(path))


@pytest.mark.parametrize("spec", ['[buckets.a]\nqueue = "amq.work"\n', '[buckets."amq.x"]\n',
                                  '[buckets.a]\nqueue = "AMQ.work"\n'])
def test_rabbitmqs_own_queue_names_are_refused(tmp_path: Path, spec: str) -> None:
    path = tmp_path / "amq.toml"
    path.write_text(spec + BUCKET)
    with pytest.raises(BucketsFileError, match=r"names starting 'amq\.' are RabbitMQ's own"):
        load_table(str(path))


def test_a_long_bad_pool_is_cut_short(tmp_path: Path) -> None:
    path = tmp_path / "pool.toml"
    path.write_text("[buckets.a]\n" + BUCKET.replace('"prefork"', '"' + "p" * 10_000 + '"'))
    with pytest.raises(BucketsFileError) as info:
        load_table(str(path))
    assert len(str(info.value)) < 400


@pytest.mark.parametrize("argv", [
    ["-m", "celery", "-A", "tasks", "worker", "-Q", "short"],
    ["-m", "config.worker_entry", "-A", "tasks", "worker", "-Q", "short"],
])
def test_celery_with_a_bad_setting_is_one_line_not_a_traceback(argv: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECUR_")}
    done = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True,
                          env={**env, "RECUR_MAX_DELIVERIES": "nan"}, timeout=60)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "recur: RECUR_MAX_DELIVERIES='nan': not a whole number (invalid literal for int() "
        "with base 10); max_deliveries is 1 to 100"]


@pytest.mark.parametrize(("env", "message"), [
    ({"RECUR_DESTINATIONS": "a:http://h1/,a:http://h2/"}, "destination 'a' is listed twice"),
    ({"RECUR_KINDS": "ping:short,ping:long"}, "kind 'ping' is given twice"),
    ({"RECUR_DESTINATIONS": "a:http://h/", "RECUR_RESEQ_STEPS": "a:x.y,a:x.z"},
     "destination 'a' is given two steps"),
])
def test_a_name_given_twice_is_refused_not_silently_replaced(
        env: dict[str, str], message: str) -> None:
    assert message in _one_problem(env)


@pytest.mark.parametrize("db", ["99999999999999999999", "١"])
def test_a_redis_database_number_must_be_ascii_and_sane(db: str) -> None:
    line = _one_problem({"RECUR_REDIS_URL": f"redis://127.0.0.1:6379/{db}"})
    assert "the Redis database after the host must be a number" in line
