"""Hostile messages in a bucket's dead-letter queue: ``recur dead list`` shows each one,
escaped and bounded, and one bad message never hides the others; ``recur dead replay``
leaves a message no worker could run where it is, with one line saying why."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner
from kombu import Connection

from config.buckets_in_use import BUCKETS_BY_NAME
from config.errors import InvalidArgument
from routing.deadletter import list_dead, reason_of, replay_dead

pytestmark = pytest.mark.services

SHORT = BUCKETS_BY_NAME["short"]
GOOD_BODY = json.dumps([[{"id": "m-1", "bucket": "short"}], {}, {}]).encode()


def put(broker: Connection, body: bytes, headers: dict[str, Any] | None,
        content_type: str | None = "application/json") -> None:
    with broker.channel() as channel:
        message = channel.prepare_message(body, content_type=content_type,
                                          content_encoding="utf-8", headers=headers)
        channel.basic_publish(message, exchange="", routing_key=SHORT.dead_queue)


def depth(broker: Connection, queue: str, want: int) -> int:
    """``queue``'s ready messages once they are ``want`` (a quorum queue takes back the
    messages of a closed channel a moment later), or after 5 s, whatever they are then."""
    deadline = time.monotonic() + 5
    while True:
        with broker.channel() as channel:
            count = int(channel.queue_declare(queue, passive=True).message_count)
        if count == want or time.monotonic() > deadline:
            return count


def run(*argv: str) -> Any:
    from tasks.cli.group import cli

    return CliRunner().invoke(cli, list(argv))


def test_an_x_death_that_is_no_list_of_tables_reads_as_no_x_death() -> None:
    for x_death in ("rejected", [1, "a"], [], None, {"queue": "q"}):
        assert reason_of({"x-death": x_death}) == ("unknown", "")


def test_one_hostile_message_hides_no_other(broker: Connection, celery_app: Any) -> None:
    put(broker, b"x", {"id": "t-before", "task": "tasks.process_message"})
    put(broker, b"x", {"id": "t-xdeath", "x-death": "not a list"})
    put(broker, b"Z" * 3_000_000, {"id": "t-huge", "task": "A" * 100_000})
    put(broker, b"\x00\x1b[2J\xff", {"id": "t-\x1b[31m\x00", "task": b"\xff\xfe"}, None)
    put(broker, GOOD_BODY, {"id": "t-after", "task": "tasks.process_message"})
    result = run("dead", "list", "short")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert [line.split(" ")[0] for line in lines] == [
        "t-before", "t-xdeath", "t-huge", "t-\\x1b[31m\\x00", "t-after"]
    assert all(len(line) < 10_000 for line in lines)  # a field is cut at 2000 characters
    assert "(100000 in all)" in lines[2] and "(3000000 in all)" in lines[2]
    assert "\x1b" not in result.output and "\x00" not in result.output
    assert lines[4].endswith('message=[{"id": "m-1", "bucket": "short"}]')
    as_json = run("dead", "list", "short", "--json")
    assert as_json.exit_code == 0, as_json.output
    assert [json.loads(line)["task_id"] for line in as_json.output.splitlines()][-1] == "t-after"
    assert depth(broker, SHORT.dead_queue, 5) == 5


def test_a_lone_surrogate_header_is_listed_escaped(broker: Connection, celery_app: Any) -> None:
    put(broker, b"x", {"id": b"t-\xed\xa0\x80"}, None)  # raw bytes: not UTF-8 at all
    found = list_dead(broker, SHORT, lambda task_id: "")
    assert [d.task_id for d in found] == ["t-\\ud800"]
    result = run("dead", "list", "short")
    assert result.exit_code == 0 and result.output.startswith("t-\\ud800 - "), result.output


def test_replay_leaves_what_no_worker_could_run(broker: Connection, celery_app: Any) -> None:
    put(broker, b"not json", {"id": "t-notjson", "task": "tasks.process_message"})
    put(broker, GOOD_BODY, {"id": "t-other", "task": "other.app.task"})
    put(broker, b"{}", None, None)
    put(broker, GOOD_BODY, {"id": "t-good", "task": "tasks.process_message",
                            "x-death": [{"queue": "gone.queue", "reason": "rejected"}]})
    result = run("dead", "replay", "short")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "left t-notjson in short.dead: body is not UTF-8 JSON (or nested too deep)",
        "left t-other in short.dead: task 'other.app.task' is no task of this app",
        "left ? in short.dead: no 'task' header: not a Celery task message",
        "replayed 1 message(s) to short"]
    assert depth(broker, SHORT.dead_queue, 3) == 3 and depth(broker, SHORT.queue, 1) == 1
    left: list[tuple[str, str]] = []
    assert replay_dead(broker, SHORT, 10, lambda task: task in celery_app.tasks, left) == 0
    assert len(left) == 3 and depth(broker, SHORT.dead_queue, 3) == 3


def test_set_aside_rows_list_bounded_and_escaped(
        sqlite_url: str, use_store: Callable[[str], None]) -> None:
    from scheduler.store import DueStore, Job
    from scheduler.store.aside import AsideRows

    use_store(sqlite_url)
    past = datetime.now(UTC) - timedelta(seconds=1)
    bucket = "b\x1b[31m" + "b" * 100_000  # another writer's row, of a bucket not in the table
    store = DueStore.open(sqlite_url)
    try:
        store.schedule([Job("k-1", "tasks.process_message", bucket, '["u",null]', past)], past)
        assert AsideRows(store).set_aside_bucket(bucket, datetime.now(UTC), 10, "gone",
                                                 datetime.now(UTC)) == 1
    finally:
        store.close()
    result = run("dead", "list", "--store")
    assert result.exit_code == 0, result.output
    [line] = result.output.splitlines()
    assert line.startswith("job k-1 ") and len(line) < 2000 and "\x1b" not in line
    assert "bucket=b\\x1b[31mbbb" in line and "(100006 characters)" in line
    result = run("dead", "list", "--store", "gone\x1b[2J")
    assert result.output == "no rows set aside in the due-jobs store for bucket gone\\x1b[2J\n"
    result = run("dead", "replay", "--store", "--key", "k\x1b[2J")
    assert isinstance(result.exception, InvalidArgument)
    assert str(result.exception).endswith("no longer set aside): k\\x1b[2J")


def test_the_schedulers_dead_sweep_reads_a_hostile_x_death(broker: Connection) -> None:
    from scheduler.dead_sweep import DeadSweep

    put(broker, b"x", {"id": "t-1", "x-death": "rejected"})  # was AttributeError: every pass
    put(broker, b"x", {"id": "t-2", "x-death": [7]})
    with broker.channel() as channel:
        read = DeadSweep._read(channel, SHORT.dead_queue)
    assert [reason for _, reason, _ in read] == ["unknown", "unknown"]


def test_destination_dead_letters_list_and_replay_escaped_and_bounded(
        broker: Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    from config.settings import settings
    from routing.reseq.dead_letters import queue_name

    name = queue_name("hostile-dest")
    record = {"destination": "hostile-dest", "seq": 6, "id": "m-6\x1b[2J\x00", "status": None,
              "reason": "r\x07" + "R" * 100_000, "at": 0,
              "message": {"blob\x00": "M" * 300_000}}
    monkeypatch.setenv("RECUR_DESTINATIONS", "hostile-dest:http://127.0.0.1:9/in")
    settings.cache_clear()
    with broker.channel() as channel:
        channel.queue_declare(name, durable=True, auto_delete=False)
        try:
            channel.basic_publish(channel.prepare_message(
                json.dumps(record).encode(), content_type="application/json"),
                exchange="", routing_key=name)
            listed = run("dead", "list", "--destination", "hostile-dest")
            replayed = run("dead", "replay", "--destination", "hostile-dest")
            assert depth(broker, name, 1) == 1
        finally:
            channel.queue_delete(name)
            monkeypatch.undo()
            settings.cache_clear()
    assert listed.exit_code == 0, listed.output
    [line] = listed.output.splitlines()
    assert line.startswith("seq=6 id=m-6\\x1b[2J\\x00 ") and len(line) < 5000
    assert line.count(" in all)") == 2 and "\x00" not in line and "\x07" not in line
    assert replayed.exit_code == 0, replayed.output
    left = replayed.output.splitlines()[-1]
    assert left.startswith("left seq 6 (message m-6\\x1b[2J\\x00) in the dead letter: ")
    assert "\x00" not in replayed.output


def test_a_deeply_nested_body_hides_nothing(broker: Connection, celery_app: Any) -> None:
    put(broker, b"[" * 999 + b"]" * 999, {"id": "t-deep", "task": "tasks.process_message"})
    put(broker, GOOD_BODY, {"id": "t-after", "task": "tasks.process_message"})
    listed = run("dead", "list", "short")
    assert listed.exit_code == 0, listed.output
    assert [line.split(" ")[0] for line in listed.output.splitlines()] == ["t-deep", "t-after"]
    replayed = run("dead", "replay", "short")
    assert replayed.exit_code == 0, replayed.output
    assert replayed.output.splitlines() == [
        "left t-deep in short.dead: body is not UTF-8 JSON (or nested too deep)",
        "replayed 1 message(s) to short"]
    assert depth(broker, SHORT.dead_queue, 1) == 1


def test_unreadable_destination_letters_are_each_listed(broker: Connection) -> None:
    """Two different unreadable letters (one nested a thousand deep: a RecursionError) were
    one ``copies=2`` line, the second hidden, or a traceback."""
    from routing.reseq.dead_letters import list_letters, queue_name

    name = queue_name("unreadable-dest")
    with broker.channel() as channel:
        channel.queue_declare(name, durable=True, auto_delete=False)
        try:
            for body in (b"[" * 5000 + b"]" * 5000, b"not json at all"):
                channel.basic_publish(channel.prepare_message(body), exchange="",
                                      routing_key=name)
            assert depth(broker, name, 2) == 2
            letters = list_letters(broker, "unreadable-dest")
        finally:
            channel.queue_delete(name)
    assert len(letters) == 2 and all(d.copies == 1 for d in letters)
    assert all(d.reason.startswith("unreadable dead letter") for d in letters)
    assert any("not json at all" in d.reason for d in letters)
