"""RECUR_BUCKETS_FILE: a user's bucket table, strictly checked; each bad file refused
with one error naming the file, the bucket and the field, and nothing started."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from config.bucketfile import load_table
from config.errors import ConfigError, UnknownBucket
from config.settings import load_settings, problems
from routing.messages import validate_message
from tests.support.processes import recur_argv

ROOT = Path(__file__).resolve().parents[2]

GOOD = """
[buckets.quick]
soft_time_limit = 10
time_limit = 15
concurrency = 3
pool = "prefork"
prefetch = 2

[buckets.web]
queue = "web-io"
soft_time_limit = 20
time_limit = 20
concurrency = 300
pool = "threads"
work_seconds = 0.1

[kinds]
ping = "quick"
scrape = "web"
"""


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / f"buckets-{len(list(tmp_path.iterdir()))}.toml"
    path.write_text(text)
    return str(path)


def test_a_good_file_is_the_whole_table_in_file_order(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    table = load_table(path)
    assert table.names == ("quick", "web")
    web = table.get("web")
    assert (web.queue, web.dead_queue, web.pool, web.concurrency, web.prefetch) == (
        "web-io", "web-io.dead", "threads", 300, 1)
    assert table.get("quick").work_seconds == 0.0
    assert dict(table.kinds) == {"ping": "quick", "scrape": "web"}


def test_settings_read_the_file_everywhere(tmp_path: Path) -> None:
    cfg = load_settings({"RECUR_BUCKETS_FILE": write(tmp_path, GOOD),
                         "RECUR_KINDS": "crawl:web"})
    assert cfg.buckets.names == ("quick", "web")
    assert cfg.pull_forward == "quick,web"  # unset: every bucket of the table
    assert dict(cfg.kinds) == {"ping": "quick", "scrape": "web", "crawl": "web"}
    assert validate_message({"id": "m", "user_id": "u", "kind": "scrape", "payload": None},
                            cfg)["bucket"] == "web"
    with pytest.raises(UnknownBucket, match="unknown bucket 'short'"):
        validate_message({"id": "m", "user_id": "u", "bucket": "short", "payload": None}, cfg)


def test_without_a_file_the_built_in_table_is_used() -> None:
    cfg = load_settings({})
    assert cfg.buckets.names == ("short", "medium", "long", "io")
    assert cfg.pull_forward == "short,medium,long,io"
    assert cfg.kinds["report"] == "long"


BUCKET = 'soft_time_limit = 10\ntime_limit = 15\nconcurrency = 2\npool = "prefork"\n'


@pytest.mark.parametrize(("text", "message"), [
    ("[buckets.a]\n" + BUCKET + "colour = 'red'\n",
     "bucket 'a': colour: unknown key"),
    ("[buckets.a]\n" + BUCKET + "[buckets.b]\n" + BUCKET + "queue = 'a'\n",
     "bucket 'b': queue: queue 'a' is already bucket 'a''s"),
    ("[buckets.a]\n" + BUCKET.replace("time_limit = 15", "time_limit = 5"),
     "bucket 'a': time_limit: 5 is below soft_time_limit 10"),
    ("[buckets.a]\n" + BUCKET.replace('"prefork"', '"gevent"'),
     "bucket 'a': pool: unknown pool 'gevent' (known: prefork, threads, solo)"),
    ("[buckets.a]\n" + BUCKET.replace("concurrency = 2\n", ""),
     "bucket 'a': concurrency: missing (required)"),
    ("[buckets.a]\n" + BUCKET.replace("concurrency = 2", "concurrency = 2.5"),
     "bucket 'a': concurrency: must be an integer, got 2.5"),
    ("[buckets.a]\n" + BUCKET.replace("concurrency = 2", "concurrency = 0"),
     "bucket 'a': concurrency: must be positive, got 0"),
    ("[buckets.a]\n" + BUCKET.replace("soft_time_limit = 10", "soft_time_limit = 'ten'"),
     "bucket 'a': soft_time_limit: must be a number, got 'ten'"),
    ("[buckets.a]\n" + BUCKET + "queue = 'outbound'\n",
     "bucket 'a': queue: queue 'outbound' is recur's own"),
    ("[buckets.a]\n" + BUCKET + "queue = 'x.dead'\n",
     "bucket 'a': queue: not a usable queue name: 'x.dead'"),
    ("[buckets.a]\n" + BUCKET + "work_seconds = -1\n",
     "bucket 'a': work_seconds: must be a number from 0 to soft_time_limit 10, got -1"),
    ("[buckets.a]\n" + BUCKET + "[kinds]\nping = 'b'\n",
     "kinds: kind 'ping' maps to unknown bucket 'b' (buckets: a)"),
    ("[bucket.a]\n" + BUCKET, "unknown top-level key 'bucket' (known: buckets, kinds, tasks)"),
    ("[kinds]\n", "no buckets: give at least one [buckets.<name>] table"),
    ("[buckets.a\n", "not valid TOML"),
])
def test_each_bad_file_is_refused_naming_file_bucket_and_field(
        tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_settings({"RECUR_BUCKETS_FILE": path})
    assert str(info.value).startswith(f"{path}: ")
    assert message in str(info.value)


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.toml: cannot read it"):
        load_settings({"RECUR_BUCKETS_FILE": str(tmp_path / "nope.toml")})


def test_settings_that_name_buckets_are_checked_against_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    with pytest.raises(ConfigError, match=r"RECUR_KINDS.*unknown bucket .long."):
        load_settings({"RECUR_BUCKETS_FILE": path, "RECUR_KINDS": "report:long"})
    with pytest.raises(ConfigError, match=r"RECUR_PULL_FORWARD.*unknown bucket .short."):
        load_settings({"RECUR_BUCKETS_FILE": path, "RECUR_PULL_FORWARD": "short"})


@pytest.mark.parametrize("command", [("worker", "a"), ("scheduler",), ("status",)])
def test_a_bad_file_stops_every_command_with_one_line(tmp_path: Path,
                                                      command: tuple[str, ...]) -> None:
    path = write(tmp_path, "[buckets.a]\n" + BUCKET.replace('"prefork"', '"gevent"'))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECUR_")}
    done = subprocess.run(recur_argv(*command), cwd=ROOT,
                          env={**env, "RECUR_BUCKETS_FILE": path}, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"recur: {path}: bucket 'a': pool: unknown pool 'gevent' (known: prefork, threads, solo)"]


@pytest.mark.parametrize(("line", "message"), [
    ("soft_time_limit = nan", "soft_time_limit: must be a finite number, got nan"),
    ("soft_time_limit = inf", "soft_time_limit: must be a finite number, got inf"),
    ("time_limit = inf", "time_limit: must be a finite number, got inf"),
    ("time_limit = -inf", "time_limit: must be a finite number, got -inf"),
    ("time_limit = nan", "time_limit: must be a finite number, got nan"),
    ("soft_time_limit = 100000", "soft_time_limit: must be at most 86400, got 100000"),
    ("time_limit = 1e9", "time_limit: must be at most 86400, got 1e+09"),
    ("concurrency = 100_000_000",
     "concurrency: must be at most 256 for pool 'prefork', got 100000000"),
    ("concurrency = 257", "concurrency: must be at most 256 for pool 'prefork', got 257"),
    ("concurrency = 9223372036854775807",
     "concurrency: must be at most 256 for pool 'prefork', got 9223372036854775807"),
    ("concurrency = nan", "concurrency: must be an integer, got nan"),
    ("concurrency = true", "concurrency: must be an integer, got True"),
    ("prefetch = 1001", "prefetch: must be at most 1000, got 1001"),
    ("prefetch = 0", "prefetch: must be positive, got 0"),
    ("prefetch = inf", "prefetch: must be an integer, got inf"),
    ("work_seconds = nan", "work_seconds: must be a number from 0 to soft_time_limit 10, got nan"),
    ("work_seconds = inf", "work_seconds: must be a number from 0 to soft_time_limit 10, got inf"),
    ("work_seconds = 10.5",
     "work_seconds: must be a number from 0 to soft_time_limit 10, got 10.5"),
])
def test_a_number_that_is_nan_inf_or_beyond_its_bound_is_refused(
        tmp_path: Path, line: str, message: str) -> None:
    key = line.split(" = ")[0]
    kept = "".join(f"{row}\n" for row in BUCKET.splitlines() if not row.startswith(f"{key} "))
    path = write(tmp_path, "[buckets.a]\n" + kept + line + "\n")
    with pytest.raises(ConfigError) as info:
        load_settings({"RECUR_BUCKETS_FILE": path})
    assert str(info.value) == f"{path}: bucket 'a': {message}"


@pytest.mark.parametrize(("pool", "most"), [("threads", 1024), ("solo", 1), ("prefork", 256)])
def test_each_pool_has_its_own_concurrency_bound(tmp_path: Path, pool: str, most: int) -> None:
    spec = f'soft_time_limit = 10\ntime_limit = 15\npool = "{pool}"\n'
    assert load_table(write(tmp_path, f"[buckets.a]\n{spec}concurrency = {most}\n")).get(
        "a").concurrency == most
    with pytest.raises(ConfigError, match=f"at most {most} for pool '{pool}'"):
        load_table(write(tmp_path, f"[buckets.a]\n{spec}concurrency = {most + 1}\n"))


def test_too_many_buckets_or_kinds_and_bad_kind_names_are_refused(tmp_path: Path) -> None:
    many = "".join(f"[buckets.b{i}]\n{BUCKET}" for i in range(65))
    with pytest.raises(ConfigError, match="65 buckets: at most 64"):
        load_table(write(tmp_path, many))
    kinds = "".join(f"k{i} = 'a'\n" for i in range(1001))
    with pytest.raises(ConfigError, match="1001 kinds: at most 1000"):
        load_table(write(tmp_path, f"[buckets.a]\n{BUCKET}[kinds]\n{kinds}"))
    for kind in ("'a b'", "'*'", "''", "'x{y}'"):
        with pytest.raises(ConfigError, match="is not a name"):
            load_table(write(tmp_path, f"[buckets.a]\n{BUCKET}[kinds]\n{kind} = 'a'\n"))


def test_a_file_whose_time_limit_outlasts_the_lease_is_a_warning_naming_both(
        tmp_path: Path) -> None:
    from config.checks import lease_warnings

    path = write(tmp_path, "[buckets.a]\n" + BUCKET.replace(
        "soft_time_limit = 10\ntime_limit = 15", "soft_time_limit = 3000\ntime_limit = 3600"))
    cfg = load_settings({"RECUR_BUCKETS_FILE": path})
    (line,) = lease_warnings(cfg.lease_seconds, cfg.buckets)
    assert "RECUR_LEASE_SECONDS=1800 is not above the time_limit of bucket 'a' (3600 s" in line
    assert path in line
    cfg = load_settings({"RECUR_BUCKETS_FILE": path, "RECUR_LEASE_SECONDS": "4000"})
    assert cfg.lease_seconds == 4000 and cfg.buckets.get("a").time_limit == 3600


def test_a_bad_file_is_not_also_reported_as_a_lease_contradiction(tmp_path: Path) -> None:
    path = write(tmp_path, "[buckets.a]\n" + BUCKET.replace("time_limit = 15", "time_limit = 'x'"))
    _, bad = problems({"RECUR_BUCKETS_FILE": path, "RECUR_LEASE_SECONDS": "20"})
    assert len(bad) == 1 and "time_limit" in bad[0], bad


def test_the_files_bounds_are_the_documented_ones() -> None:
    from config.bucketfile import BOUNDS, CONCURRENCY, MAX_BUCKETS, MAX_KINDS

    doc = " ".join((ROOT / "docs" / "configuration.md").read_text().split())
    assert f"`time_limit` above 0, at most {BOUNDS['time_limit']:g}" in doc
    assert f"`prefetch` 1 to {BOUNDS['prefetch']:g}" in doc
    for pool, most in CONCURRENCY.items():
        assert (f"1 for `{pool}`" if most == 1 else f"1 to {most} for `{pool}`") in doc
    assert f"at most {MAX_BUCKETS} buckets and {MAX_KINDS} kinds" in doc


def test_a_file_that_is_not_utf8_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(b"[buckets.a]\n" + BUCKET.encode() + b"queue = 'caf\xe9'\n")
    with pytest.raises(ConfigError, match=r"latin1\.toml: not valid TOML: not UTF-8 text"):
        load_settings({"RECUR_BUCKETS_FILE": str(path)})
