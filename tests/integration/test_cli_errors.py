"""Every command ends a failure with one line ``recur: …`` and exit code 2, never a traceback.

Each case runs the real CLI as a subprocess against the real services (or a port
where nothing listens), in an empty directory.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support import services
from tests.support.processes import recur_argv

pytestmark = pytest.mark.services

CLOSED = services.free_port()  # nothing listens here
PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def run_recur(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("RECUR_")}
    full.update({**services.test_environment(), **env})
    return subprocess.run(recur_argv(*args), env=full, cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def error_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


CASES = {
    "malformed number": (["status"], {"RECUR_MAX_PAYLOAD_BYTES": "1k"},
                         "RECUR_MAX_PAYLOAD_BYTES='1k': not a whole number"),
    "out of bounds": (["dead", "list", "short"], {"RECUR_MAX_DELIVERIES": "0"},
                      "RECUR_MAX_DELIVERIES"),
    "unknown setting": (["topology"], {"RECUR_BROKR_URL": "amqp://x"}, "RECUR_BROKR_URL"),
    "postgres:// URL": (["db", "upgrade"],
                        {"RECUR_DATABASE_URL": "postgres://app:s3cret@db.example/recur"},
                        "use postgresql+psycopg://app:***@db.example/recur"),
    "postgresql:// URL": (["status"], {"RECUR_DATABASE_URL": "postgresql://postgres@h/test"},
                          "use postgresql+psycopg://"),
    "broker down, dead list": (["dead", "list", "short"],
                               {"RECUR_BROKER_URL": f"amqp://guest:guest@127.0.0.1:{CLOSED}//"},
                               "cannot connect"),
    "broker refuses credentials, dead list": (
        ["dead", "list", "short"], {"RECUR_BROKER_URL": "amqp://guest:wrong@127.0.0.1:5672//"},
        "ACCESS_REFUSED"),
    "broker refuses credentials, replay": (
        ["dead", "replay", "short"], {"RECUR_BROKER_URL": "amqp://guest:wrong@127.0.0.1:5672//"},
        "ACCESS_REFUSED"),
    # the daemons: a refusal is no outage to wait out (a worker or scheduler that retried a
    # wrong password would loop on it forever), nor Celery's traceback
    "broker refuses credentials, worker": (
        ["worker", "short"], {"RECUR_BROKER_URL": "amqp://guest:wrong@127.0.0.1:5672//"},
        "ACCESS_REFUSED"),
    "broker refuses credentials, scheduler": (
        ["scheduler"], {"RECUR_BROKER_URL": "amqp://guest:wrong@127.0.0.1:5672//"},
        "ACCESS_REFUSED"),
    "vhost missing, worker": (["worker", "short"], {"RECUR_BROKER_URL": "amqp://guest:guest@"
                                                    f"127.0.0.1:5672/{services.VHOST}-none"},
                              "NOT_ALLOWED"),
    "vhost missing, scheduler": (["scheduler"], {"RECUR_BROKER_URL": "amqp://guest:guest@"
                                                 f"127.0.0.1:5672/{services.VHOST}-none"},
                                 "NOT_ALLOWED"),
    "broker down, topology": (["topology"],
                              {"RECUR_BROKER_URL": f"amqp://guest:guest@127.0.0.1:{CLOSED}//"},
                              "cannot connect"),
    "vhost missing": (["dead", "list", "short"],
                           {"RECUR_BROKER_URL": "amqp://guest:guest@127.0.0.1:5672/"
                                                f"{services.VHOST}-none"},
                           "vhost"),
    "redis down": (["resequencer", "status"],
                   {"RECUR_REDIS_URL": f"redis://127.0.0.1:{CLOSED}/0"}, "Redis"),
    "database down": (["db", "upgrade"],
                      {"RECUR_DATABASE_URL": PG.replace("5432", str(CLOSED))},
                      "Connection refused"),
    "wrong database name": (["db", "upgrade"],
                            {"RECUR_DATABASE_URL": PG.replace("/test", "/no_such_db_i15")},
                            "no_such_db_i15"),
    "store never created": (["status"], {}, "recur db upgrade"),
    "flower without credentials": (["flower"], {}, "RECUR_FLOWER_USER"),
    "exporter without a port": (["exporter"], {}, "RECUR_METRICS_PORT"),
    # click's usage errors: one line too, not its Usage/Try/Error block
    "not a number": (["jobs", "list", "--limit", "abc"], {},
                     "jobs list: Invalid value for '--limit'"),
    "unknown option": (["jobs", "show", "-1"], {}, "No such option '-1'"),
    "extra argument": (["status", "extra"], {}, "unexpected extra argument"),
    "unknown command": (["nosuch"], {}, "No such command 'nosuch'"),
    "huge extra argument": (["topology", "x" * 10_000], {}, "unexpected extra argument"),
    # bytes that are not UTF-8 (lone surrogates once decoded) reach no driver
    "argument not UTF-8": (["jobs", "show", "k\udcff"], {},
                           "argument 3 'k\\xff' is not valid UTF-8"),
    "revision unknown": (["db", "upgrade", "--revision", "nope"], {}, "--revision 'nope'"),
    "revision relative": (["db", "upgrade", "--revision", "-5"], {}, "relative revisions"),
    "revision empty": (["db", "upgrade", "--revision", ""], {}, "--revision ''"),
    "replay a negative count": (["dead", "replay", "short", "--limit", "-5"], {},
                                "--limit must be 1..1000, got -5"),
    "store and destination": (["dead", "list", "--store", "--destination", "d"], {},
                              "give --store or --destination, not both"),
    "negative skipped": (["resequencer", "status", "--skipped", "-5"], {},
                         "--skipped must be 0..1000, got -5"),
    "empty destination name": (["resequencer", "status", ""], {}, "is no destination name"),
    "blank user filter": (["jobs", "list", "--user", " "], {}, "--user needs a user id"),
    "redis URL of another scheme": (["status"], {"RECUR_REDIS_URL": "http://h:6379/0"},
                                    "RECUR_REDIS_URL="),
    "redis database not a number": (["status"], {"RECUR_REDIS_URL": "redis://h:6379/abc"},
                                    "RECUR_REDIS_URL="),
    "empty broker URL": (["status"], {"RECUR_BROKER_URL": ""}, "RECUR_BROKER_URL="),
    "broker port out of range": (["topology"],
                                 {"RECUR_BROKER_URL": "amqp://g:s3cret@h:99999//"},
                                 "RECUR_BROKER_URL="),
    "database port not a number": (["status"], {"RECUR_DATABASE_URL": PG.replace("5432", "x")},
                                   "RECUR_DATABASE_URL="),
    "unknown result backend": (["status"], {"RECUR_RESULT_BACKEND": "abc"},
                               "RECUR_RESULT_BACKEND="),
    "unknown log level": (["status"], {"RECUR_LOG_LEVEL": "loud"}, "RECUR_LOG_LEVEL="),
    "variable not UTF-8": (["status"], {"RECUR_KEY_PREFIX": "p\udcff"},
                           "RECUR_KEY_PREFIX: not valid UTF-8"),
    # syntax checked by every command, nothing imported (the worker imports them)
    "tracing hook without a function": (["status"], {"RECUR_OTEL_SETUP": "myapp.tracing"},
                                         "RECUR_OTEL_SETUP="),
    "tracing hook not a name": (["topology"], {"RECUR_OTEL_SETUP": "my-app:install"},
                                "RECUR_OTEL_SETUP="),
    "task module a keyword": (["status"], {"RECUR_IMPORTS": "myapp.class"}, "RECUR_IMPORTS="),
}


@pytest.mark.parametrize("case", list(CASES))
def test_failure_is_one_line_and_exit_code_2(case: str, tmp_path: Path,
                                             live_services: None) -> None:
    args, env, expected = CASES[case]
    result = run_recur(args, env, tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    errors = [line for line in error_lines(result) if line.startswith("recur: ")]
    assert len(errors) == 1, result.stderr
    assert expected in errors[0]
    assert "s3cret" not in result.stderr and "wrong@" not in result.stderr
    assert not (tmp_path / "recur.sqlite3").exists(), "reading created a database file"


def test_settings_lists_every_bad_variable_at_once(tmp_path: Path) -> None:
    result = run_recur(["settings"], {"RECUR_MAX_PAYLOAD_BYTES": "1k", "RECUR_LOCK_TTL": "soon",
                                      "RECUR_NOPE": "1"}, tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "RECUR_BROKER_URL=" in result.stdout  # the table is still printed
    bad = error_lines(result)
    assert len(bad) == 3 and all(line.startswith("recur: ") for line in bad), bad
    assert {"RECUR_MAX_PAYLOAD_BYTES", "RECUR_LOCK_TTL", "RECUR_NOPE"} == {
        line.split()[1].split("=")[0].rstrip(":") for line in bad}


def test_settings_with_good_variables_exits_0(tmp_path: Path) -> None:
    result = run_recur(["settings"], {}, tmp_path)
    assert result.returncode == 0 and not result.stderr.strip()


def test_debug_shows_the_traceback_too(tmp_path: Path) -> None:
    result = run_recur(["--debug", "status"], {"RECUR_MAX_PAYLOAD_BYTES": "1k"}, tmp_path)
    assert result.returncode == 2
    assert "Traceback" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("recur: ")


def test_daemons_refused_a_permission_or_a_redis_password_stop_with_one_line(
        tmp_path: Path, live_services: None) -> None:
    """A vhost where the user may not configure (declare) anything, and a Redis that wants a
    password the URL lacks or gets wrong: the worker and the scheduler each stop at start."""
    from tests.support.private_redis import PrivateRedis

    locked = PrivateRedis(tmp_path)
    with services.scratch_vhost("noconf", configure="^$") as vhost:
        locked.start()
        try:
            locked.client.config_set("requirepass", "s3cret-pw")
            wrong = locked.url.replace("redis://", "redis://:wrong-pw@")
            cases = [({"RECUR_BROKER_URL": f"amqp://guest:guest@127.0.0.1:5672/{vhost}"},
                      "ACCESS_REFUSED"),
                     ({"RECUR_REDIS_URL": locked.url}, "RECUR_REDIS_URL"),
                     ({"RECUR_REDIS_URL": wrong}, "RECUR_REDIS_URL")]
            for env, expected in cases:
                for args in (["worker", "short"], ["scheduler"]):
                    result = run_recur(args, env, tmp_path)
                    assert result.returncode == 2, (args, env, result.stderr)
                    assert "Traceback" not in result.stderr + result.stdout
                    errors = [line for line in error_lines(result) if line.startswith("recur: ")]
                    assert len(errors) == 1 and expected in errors[0], (args, env, result.stderr)
                    assert "wrong-pw" not in result.stderr
        finally:
            locked.client.close()
            locked.stop()
