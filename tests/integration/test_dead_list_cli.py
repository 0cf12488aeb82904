"""``recur dead list`` shows a stored failure as ``ExceptionClass: message``, and says so
when the dead-letter queue is empty."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from kombu import Connection

from config.errors import InvalidMessage
from tests.integration.test_cli_errors import run_recur

pytestmark = pytest.mark.services


def test_dead_message_shows_its_exception_class_and_message(
        broker: Connection, celery_app: Any, tmp_path: Path) -> None:
    task_id = str(uuid.uuid4())
    celery_app.backend.mark_as_failure(task_id, InvalidMessage("user_id", "missing"))
    body = json.dumps([[{"id": "m-1", "bucket": "short"}], {}, {}]).encode()
    with broker.channel() as channel:
        channel.basic_publish(channel.prepare_message(
            body, content_type="application/json", content_encoding="utf-8",
            headers={"id": task_id, "task": "tasks.process_message"}),
            exchange="", routing_key="short.dead")
    result = run_recur(["dead", "list", "short"], {}, tmp_path)
    assert result.returncode == 0, result.stderr
    [line] = result.stdout.splitlines()
    assert "error=InvalidMessage: invalid message: user_id: missing " in line
    assert "<class" not in line and "Exception(" not in line


def test_empty_listings_say_so(broker: Connection, tmp_path: Path) -> None:
    result = run_recur(["dead", "list", "medium"], {}, tmp_path)
    assert result.returncode == 0
    assert result.stdout.strip() == "medium.dead is empty: no dead messages"
    fresh = {"RECUR_KEY_PREFIX": f"recur-test-empty-{uuid.uuid4().hex[:8]}"}
    result = run_recur(["resequencer", "status"], fresh, tmp_path)
    assert result.returncode == 0
    assert result.stdout.strip() == "no resequencer destinations yet"
