"""Rates in the configuration: a resequencer destination's ``rate=`` in RECUR_DESTINATIONS,
and a bucket file's default rate per bucket and per task. Bad values are one line naming
the destination, or the file, the bucket (or task) and the field."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from config.bucketfile import load_table
from config.destinations import rate_of
from config.errors import ConfigError, InvalidMessage
from config.settings import load_settings
from tasks.flow.defaults import default_for
from tests.support.processes import recur_argv

ROOT = Path(__file__).resolve().parents[2]
BUCKET = 'soft_time_limit = 10\ntime_limit = 15\nconcurrency = 2\npool = "prefork"\n'


def test_a_destination_may_have_a_rate_and_a_burst() -> None:
    cfg = load_settings({"RECUR_DESTINATIONS": "billing:http://h/in rate=10/s burst=5, "
                                               "crm:https://c/x rate=600/m,plain:http://p/"})
    assert dict(cfg.destinations) == {"billing": "http://h/in", "crm": "https://c/x",
                                      "plain": "http://p/"}
    billing, crm = rate_of(cfg.destinations, "billing"), rate_of(cfg.destinations, "crm")
    assert billing is not None and (billing.per_second, billing.burst) == (10, 5)
    assert crm is not None and (crm.per_second, crm.burst) == (10, 1)
    assert rate_of(cfg.destinations, "plain") is None
    assert rate_of(load_settings({}).destinations, "billing") is None


@pytest.mark.parametrize(("value", "problem"), [
    ("b:http://h/ rate=10/x", "destination 'b': rate '10/x' is not '<count>/<unit>'"),
    ("b:http://h/ rate=0/s", "destination 'b': rate '0/s': the count must be above 0"),
    ("b:http://h/ rate=1/s burst=0", "destination 'b': burst must be a whole number from 1"),
    ("b:http://h/ burst=3", "destination 'b': burst= needs a rate="),
    ("b:http://h/ speed=3", "destination 'b': 'speed=3' is not rate=<n>/<s|m|h> or burst=<n>"),
    ("b:http://h/ rate=1/s rate=2/s", "destination 'b': rate= given twice"),
    # A URL no send can use is refused at start, not failed (or crashed on) at every send.
    ("b:http:///in", "destination 'b': URL 'http:///in' has no host"),
    ("b:https://h:99999/in", "destination 'b': URL 'https://h:99999/in' has port 99999"),
    ("b:http://xn--bad-.test/in", "destination 'b': URL 'http://xn--bad-.test/in' "),
    ("b:http://" + "a" * 64 + ".test/in", "destination 'b': URL 'http://aaaa"),
])
def test_a_bad_destination_rate_or_url_is_one_line_naming_it(value: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings({"RECUR_DESTINATIONS": value})
    text = str(info.value)
    assert text.startswith("RECUR_DESTINATIONS=") and problem in text
    assert "\n" not in text


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / f"buckets-{len(list(tmp_path.iterdir()))}.toml"
    path.write_text(text)
    return str(path)


def test_a_bucket_and_a_task_get_their_default_rates(tmp_path: Path) -> None:
    table = load_table(write(tmp_path, (
        "[buckets.a]\n" + BUCKET + 'rate_limit = "10/s"\nrate_burst = 3\n'
        "[buckets.b]\n" + BUCKET + "queue = 'b'\n"
        '[tasks."myapp.partner"]\nrate_limit = "2/m"\nrate_key = "payload.account"\n')))
    bucket = default_for(table, "myapp.other", "a")
    assert bucket is not None and (bucket.rate.per_second, bucket.rate.burst) == (10, 3)
    assert bucket.key == "user_id" and bucket.scope == "bucket=a"
    task = default_for(table, "myapp.partner", "a")  # the task's own beats its bucket's
    assert task is not None and task.rate.per == 60 and task.key == "payload.account"
    assert default_for(table, "myapp.other", "b") is None
    # Keys are per bucket (or task) and field value: two scopes never share a limit.
    message = {"id": "m1", "user_id": "u1", "bucket": "a", "payload": {"account": 7}}
    assert bucket.key_of(message) == "bucket=a:u1"
    assert task.key_of(message) == "task=myapp.partner:7"
    with pytest.raises(InvalidMessage, match=r"rate limit of task=myapp\.partner"):
        task.key_of({**message, "payload": {}})


@pytest.mark.parametrize(("text", "message"), [
    ("[buckets.a]\n" + BUCKET + 'rate_limit = "10/x"\n',
     "bucket 'a': rate_limit: rate '10/x' is not '<count>/<unit>' with unit s, m or h"),
    ("[buckets.a]\n" + BUCKET + "rate_limit = 10\n",
     "bucket 'a': rate_limit: rate must be a string like '10/s'"),
    ("[buckets.a]\n" + BUCKET + 'rate_limit = "5/s"\nrate_burst = 0\n',
     "bucket 'a': rate_burst: burst must be a whole number from 1 to 100000, got 0"),
    ("[buckets.a]\n" + BUCKET + "rate_burst = 2\n",
     "bucket 'a': rate_burst: needs rate_limit"),
    ("[buckets.a]\n" + BUCKET + 'rate_limit = "5/s"\nrate_key = "colour"\n',
     "bucket 'a': rate_key: must be a message field: user_id, id, bucket, kind or "
     "payload.<name>, got 'colour'"),
    ("[buckets.a]\n" + BUCKET + '[tasks."t.x"]\nrate_limit = "1/q"\n',
     "task 't.x': rate_limit: rate '1/q' is not '<count>/<unit>'"),
    ("[buckets.a]\n" + BUCKET + '[tasks."t.x"]\nrate_key = "id"\n',
     "task 't.x': rate_key: needs rate_limit"),
    ("[buckets.a]\n" + BUCKET + '[tasks."t.x"]\nrate = "1/s"\n',
     "task 't.x': rate: unknown key (known: rate_limit, rate_burst, rate_key)"),
    ("[buckets.a]\n" + BUCKET + '[tasks."t x"]\nrate_limit = "1/s"\n',
     "task 't x': not a task name"),
])
def test_a_bad_default_rate_is_refused_naming_the_bucket_or_task_and_the_field(
        tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_settings({"RECUR_BUCKETS_FILE": path})
    assert str(info.value).startswith(f"{path}: ") and message in str(info.value)


def test_a_bad_default_rate_stops_a_worker_with_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, "[buckets.a]\n" + BUCKET + 'rate_limit = "ten a second"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECUR_")}
    done = subprocess.run(recur_argv("worker", "a"), cwd=ROOT,
                          env={**env, "RECUR_BUCKETS_FILE": path}, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"recur: {path}: bucket 'a': rate_limit: rate 'ten a second' is not '<count>/<unit>' "
        "with unit s, m or h (e.g. '10/s', '600/m', '5/h')"]
