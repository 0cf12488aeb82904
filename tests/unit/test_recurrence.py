"""A message recurs when its payload says so; anything else runs once."""

from __future__ import annotations

from typing import Any

import pytest

from config.errors import InvalidMessage
from routing.messages import Message, validate_message
from tasks.process import next_run


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
