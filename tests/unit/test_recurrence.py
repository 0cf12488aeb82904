"""A message recurs when its payload says so; anything else runs once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from config.errors import ConfigError, InvalidMessage
from config.settings import load_settings
from routing.messages import Message, validate_message
from routing.recurrence import MAX_EVERY, MAX_RUNS, Recurrence, recurrence_of
from tasks.process import next_run, process_message


def msg(payload: Any) -> Message:
    return Message(id="m", user_id="u", bucket="short", payload=payload)


@pytest.mark.parametrize("payload", [None, 3, "every", [1], {"n": 1}])
def test_payload_without_every_runs_once(payload: Any) -> None:
    assert next_run(msg(payload)) is None


def test_counted_runs_go_down_to_the_last_one() -> None:
    delay, nxt = next_run(msg({"every": 2, "runs": 3, "n": 7})) or (0, None)
    assert delay == 2.0 and nxt is not None
    assert nxt["payload"] == {"every": 2, "runs": 2, "n": 7} and nxt["id"] == "m"
    assert next_run(msg({"every": 2, "runs": 1})) is None


def test_next_message_keeps_kind_instead_of_bucket() -> None:
    raw = {"id": "m", "user_id": "u", "kind": "report", "payload": {"every": 1, "runs": 2}}
    again = next_run(raw)
    assert again is not None
    assert again[1] == {**raw, "payload": {"every": 1, "runs": 1}}
    assert validate_message(again[1])["bucket"] == "long"


def test_runs_absent_or_null_recurs_forever() -> None:
    for payload in ({"every": 60}, {"every": 60, "runs": None}):
        again = next_run(msg(payload))
        assert again is not None and again[1]["payload"]["runs"] is None


@pytest.mark.parametrize("payload", [{"every": "soon"}, {"every": -1}, {"every": True},
                                     {"every": 5, "runs": "3"}, {"every": 5, "runs": 1.5}])
def test_malformed_schedule_names_the_payload(payload: Any) -> None:
    with pytest.raises(InvalidMessage, match="payload"):
        next_run(msg(payload))


# --- the minimum interval and the other edges of a schedule ------------------------------

HUGE = 10**400


@pytest.mark.parametrize(("payload", "field", "words"), [
    ({"every": 0, "runs": None}, "payload.every", "at least RECUR_MIN_EVERY = 0.1 s"),
    ({"every": 0}, "payload.every", "at least RECUR_MIN_EVERY = 0.1 s"),
    ({"every": 0.0999, "runs": 5}, "payload.every", "at least RECUR_MIN_EVERY = 0.1 s"),
    ({"every": -0.0}, "payload.every", "at least RECUR_MIN_EVERY"),
    ({"every": -1e308}, "payload.every", "at least RECUR_MIN_EVERY"),
    ({"every": float("nan")}, "payload.every", "finite"),
    ({"every": float("inf")}, "payload.every", "at most 315360000"),
    ({"every": float("-inf")}, "payload.every", "at least RECUR_MIN_EVERY"),
    ({"every": HUGE}, "payload.every", "an integer of 1329 bits"),
    ({"every": False}, "payload.every", "must be a number"),
    ({"every": None}, "payload.every", "must be a number"),
    ({"every": "60"}, "payload.every", "must be a number"),
    ({"every": [60]}, "payload.every", "must be a number"),
    ({"runs": 3}, "payload.every", "'runs' needs 'every'"),
    ({"every": 60, "runs": 0}, "payload.runs", "from 1 to 1000000000"),
    ({"every": 60, "runs": -3}, "payload.runs", "from 1 to 1000000000"),
    ({"every": 60, "runs": 1_000_000_001}, "payload.runs", "from 1 to 1000000000"),
    ({"every": 60, "runs": HUGE}, "payload.runs", "an integer of 1329 bits"),
    ({"every": 60, "runs": 3.0}, "payload.runs", "got 3.0"),
    ({"every": 60, "runs": float("inf")}, "payload.runs", "got inf"),
    ({"every": 60, "runs": True}, "payload.runs", "got True"),
    ({"every": 60, "runs": "forever"}, "payload.runs", "got 'forever'"),
])
def test_each_schedule_edge_is_refused_naming_its_field(payload: Any, field: str,
                                                        words: str) -> None:
    with pytest.raises(InvalidMessage) as info:
        recurrence_of(payload)
    assert info.value.field == field and words in str(info.value), str(info.value)
    assert len(str(info.value)) < 200


@pytest.mark.parametrize(("payload", "expected"), [
    ({"every": 1}, Recurrence(1.0, None)),
    ({"every": 1.0, "runs": 1}, Recurrence(1.0, 1)),
    ({"every": MAX_EVERY, "runs": MAX_RUNS}, Recurrence(MAX_EVERY, MAX_RUNS)),
])
def test_the_edges_themselves_are_accepted(payload: Any, expected: Recurrence) -> None:
    assert recurrence_of(payload) == expected


def test_the_minimum_is_the_setting_and_can_be_raised_or_lowered() -> None:
    assert load_settings({}).min_every == 0.1
    with pytest.raises(InvalidMessage, match="at least RECUR_MIN_EVERY = 60 s"):
        recurrence_of({"every": 30}, min_every=60)
    assert recurrence_of({"every": 0.25}, min_every=0.25) == Recurrence(0.25, None)
    for raw in ("0", "-1", "nan", "inf", "86401"):
        with pytest.raises(ConfigError, match="RECUR_MIN_EVERY"):
            load_settings({"RECUR_MIN_EVERY": raw})


@pytest.mark.parametrize("options", [{}, {"countdown": 60}, {"job_key": "tight-loop"}])
def test_apply_async_refuses_a_schedule_under_the_minimum_naming_field_and_minimum(
        options: dict[str, Any]) -> None:
    message = {"id": "m", "user_id": "u", "bucket": "short", "payload": {"every": 0, "runs": None}}
    with pytest.raises(InvalidMessage) as info:
        process_message.apply_async((message,), **options)
    assert info.value.field == "payload.every"
    assert "RECUR_MIN_EVERY = 0.1 s" in str(info.value) and "got 0" in str(info.value)
    with pytest.raises(InvalidMessage, match=r"payload\.every"):
        process_message.apply_async(kwargs={"message": message})


def test_apply_async_reads_the_minimum_of_its_own_process(tmp_path: Path) -> None:
    code = ("from tasks import process_message\n"
            "m = {'id': 'm', 'user_id': 'u', 'bucket': 'short', 'payload': {'every': 5}}\n"
            "process_message.apply_async((m,))\n")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("RECUR_")},
           "RECUR_MIN_EVERY": "10"}
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "InvalidMessage: invalid message: payload.every: must be at least RECUR_MIN_EVERY = " \
           "10 s" in done.stderr


def test_a_worker_runs_a_stored_schedule_under_the_minimum_at_the_minimum() -> None:
    """A row stored around apply_async (or before the minimum was raised) is not lost:
    its next run is RECUR_MIN_EVERY away, and so is every one after it."""
    delay, following = next_run(msg({"every": 0, "runs": None})) or (None, {})
    assert delay == 0.1 and following["payload"]["every"] == 0.1
    again = next_run(following)
    assert again is not None and again[0] == 0.1
    with pytest.raises(InvalidMessage, match="finite"):
        next_run(msg({"every": float("nan"), "runs": None}))
