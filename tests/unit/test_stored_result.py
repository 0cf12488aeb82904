"""The pieces of a stored call's AsyncResult that need no service: which ids a revoke
names, when a process has no store to read, and the task id a dispatched run gets."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

from scheduler.store import Claimed
from scheduler.task_message import task_message
from tasks.revoke import ids_of
from tasks.stored_result import store_exists


def test_a_revoke_names_one_id_or_several() -> None:
    assert ids_of("job-1") == ["job-1"]
    assert ids_of(["a", "b", "", 3]) == ["a", "b"]
    assert ids_of(("a",)) == ["a"]
    assert ids_of(None) == []


def test_a_missing_sqlite_file_is_no_store(tmp_path: Path) -> None:
    path = tmp_path / "due.sqlite3"
    assert not store_exists(f"sqlite:///{path}")
    assert not path.exists()  # asking made no file
    path.touch()
    assert store_exists(f"sqlite:///{path}")
    assert store_exists("postgresql+psycopg://u@127.0.0.1:5432/db")


def row(key: str) -> Claimed:
    now = datetime.now(UTC)
    return Claimed(job_key=key, task="tasks.process_message", args='["m","u",{}]',
                   due_at=now, bucket="short", token=3, lease_until=now)


def test_every_run_of_a_stored_job_has_its_key_as_task_id() -> None:
    message = task_message(row("report-42"))
    assert message.task_id == message.headers["id"] == "report-42"
    assert message.correlation_id == "report-42"
    long_key = "ключ" * 100  # 800 bytes: over an AMQP short string
    long = task_message(row(long_key))
    assert long.headers["id"] == long_key
    assert str(uuid.UUID(long.correlation_id)) == long.correlation_id
