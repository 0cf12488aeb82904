"""Resequencer state another program wrote in Redis (text, floats, numbers past 64 bits,
bytes that are not UTF-8, keys of another type, a broken outage record, skip records that
are no JSON, destinations that name none): ``recur resequencer status`` and ``recur
status`` print every destination they can read and name each unreadable key in one
``recur:`` line, exit code 2, never a traceback. In-process (click's runner), on the real
Redis under a key prefix of the test's own."""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from config.settings import load_settings, settings
from routing.reseq.state import Resequencer, skip_record

pytestmark = pytest.mark.services


@pytest.fixture
def reseq(redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> Iterator[Resequencer]:
    prefix = f"recur-test-hostile-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("RECUR_KEY_PREFIX", prefix)
    settings.cache_clear()
    yield Resequencer(redis_client, load_settings(os.environ))
    for key in redis_client.scan_iter(f"{prefix}:*"):
        redis_client.delete(key)
    monkeypatch.undo()
    settings.cache_clear()


def status(*argv: str) -> Any:
    from tasks.cli import cli

    result = CliRunner().invoke(cli, ["resequencer", "status", *argv])
    assert result.exception is None or isinstance(result.exception, SystemExit), result
    return result


def one_line_each(stderr: str, keys: list[str]) -> None:
    lines = stderr.splitlines()
    assert all(line.startswith("recur: key ") for line in lines), stderr
    assert all(len(line) < 400 and "\x1b" not in line for line in lines), stderr
    for key in keys:
        assert sum(f"key {key} " in line for line in lines) == 1, (key, stderr)
    assert len(lines) == len(keys), stderr


def test_garbage_of_each_shape_is_named_by_key_and_the_rest_is_shown(reseq: Resequencer) -> None:
    c = reseq.client
    reseq.assign("ok", ["m1", "m2"])
    c.lpush(
        reseq.key("ok", "skipped"),
        "not json",
        json.dumps([1]),
        json.dumps(skip_record(1, "\x1b[2J" + "i" * 10_000, "gap")),
    )
    bad = {
        "text": ("sent", lambda k: c.set(k, "abc")),
        "float": ("seq", lambda k: c.set(k, "1e400")),
        "huge": ("sent", lambda k: c.set(k, "9" * 10_000)),
        "negative": ("seq", lambda k: c.set(k, "-5")),
        "bytes": ("sent", lambda k: c.set(k, b"\xff\xfe")),
        "list": ("sent", lambda k: c.rpush(k, "1")),
        "buffer": ("buffer", lambda k: c.set(k, "x")),
        "stats": ("stats", lambda k: c.sadd(k, "x")),
        "field": (
            "stats",
            lambda k: c.hset(k, mapping={"sent": "abc", "late": "1" * 100, "refused:500": b"\xff"}),
        ),
        "outage": ("outage", lambda k: c.hset(k, mapping={"since": "1" * 5000, "x": "y"})),
        "outage2": ("outage", lambda k: c.set(k, "down")),
    }
    for name, (part, write) in bad.items():
        reseq.assign(name, ["m1"])
        write(reseq.key(name, part))
    members = reseq.key("x", "x").split(":reseq:")[0] + ":reseq:destinations"
    c.sadd(members, "\x1b[2J" + "d" * 100_000, b"\xff")

    result = status("--skipped", "5")
    assert result.exit_code == 2
    out = result.stdout.splitlines()
    assert "destination ok: next=1 assigned=2 buffered=0 in_flight=2" in result.stdout
    assert sum(line.startswith("destination ") for line in out) == 1 + len(bad)
    assert "destination field: next=1 assigned=1" in result.stdout  # its counters: 0
    assert "  skipped seq=1 id=\\x1b[2Jiii" in result.stdout  # escaped, cut
    assert max(map(len, out)) < 400 and "\x1b" not in result.stdout
    one_line_each(
        result.stderr,
        [reseq.key(n, part) for n, (part, _) in bad.items()]
        + [reseq.key("ok", "skipped"), members],
    )
    assert "holds 2 entry(ies) that are no skip record" in result.stderr
    assert re.search(
        r"field \S+ holds b'[^\n]*, not a count \(2 more field\(s\) alike\)", result.stderr
    )

    named = status("huge")  # a destination asked for by name: only its own key
    assert named.exit_code == 2 and "destination huge: next=1" in named.stdout
    one_line_each(named.stderr, [reseq.key("huge", "sent")])
    assert status("ok").exit_code == 0  # nothing unreadable: exit code 0

    # `recur status` reads the same way: destinations shown, each bad key a failure line.
    from scheduler.status.report import Report, read_destinations

    report = Report()
    read_destinations(settings(), report)
    assert len(report.destinations) == 1 + len(bad)
    assert sum(reseq.key("huge", "sent") in line for line in report.failures) == 1

    c.delete(members)
    c.set(members, "not a set")
    listed = status()
    assert listed.exit_code == 2 and listed.stdout == ""
    one_line_each(listed.stderr, [members])
