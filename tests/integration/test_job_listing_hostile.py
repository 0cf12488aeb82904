"""Job keys and user ids another writer put in the store by SQL (100 kB each, with terminal
escapes): ``recur jobs list|show|cancel|reschedule`` print each one cut and escaped, so a
listing stays one readable line a job; ``--json`` keeps them whole. In-process (click's
runner), on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from scheduler.store import DueStore, Job

pytestmark = pytest.mark.services

HUGE = 100_000
#: The longest line a command may print for such a row (a cut value and its field names).
LONGEST = 2_500
KEY = "\x1b[2J" + "k" * HUGE  # compressible: PostgreSQL's index holds it
USER = "\x1b]0;owned\x07" + "u" * HUGE


def recur(url: str, *argv: str) -> Any:
    from tasks.cli import cli

    result = CliRunner().invoke(cli, list(argv), env={"RECUR_DATABASE_URL": url})
    assert result.exit_code == 0, (argv[:2], result.output[:500], result.exception)
    return str(result.output)


def short_and_escaped(output: str) -> None:
    assert "\x1b" not in output and "\x07" not in output, output[:300]
    assert max(len(line) for line in output.splitlines()) <= LONGEST


def test_a_100_kb_key_and_user_id_written_by_sql_are_cut_and_escaped(
    store_url: str, use_store: Callable[[str], None]
) -> None:
    use_store(store_url)
    store = DueStore.open(store_url)
    later = datetime.now(UTC) + timedelta(hours=1)
    store.schedule(
        [Job("seed", "tasks.process_message", "short", json.dumps(["u-seed", None]), later)],
        datetime.now(UTC),
    )
    with store.transaction("write hostile rows by SQL") as conn:
        conn.execute(
            text(
                "INSERT INTO due_jobs (job_key, task_id, bucket, args, due_at) "
                "SELECT :key, task_id, bucket, :args, due_at FROM due_jobs "
                "WHERE job_key = 'seed'"
            ),
            [
                {"key": KEY, "args": json.dumps(["u-1", None])},
                {"key": "of-a-huge-user", "args": json.dumps([USER, {"n": 1}])},
            ],
        )
    store.close()

    listed = recur(store_url, "jobs", "list")
    short_and_escaped(listed)
    assert "\\x1b[2Jkkk" in listed and "…" in listed
    assert len(listed.splitlines()) == 4  # three jobs and the footer
    whole = [json.loads(line) for line in recur(store_url, "jobs", "list", "--json").splitlines()]
    assert KEY in [doc.get("job_key") for doc in whole]  # --json: whole
    for argv in (
        ["jobs", "show", KEY],
        ["jobs", "show", "of-a-huge-user"],
        ["jobs", "reschedule", KEY, "--in", "2h"],
        ["jobs", "cancel", KEY],
        ["jobs", "cancel", "--user", USER],
    ):
        output = recur(store_url, *argv)
        short_and_escaped(output)
        assert output.strip(), argv[:2]
    assert recur(store_url, "jobs", "list").count("\n") == 2  # seed and the footer
