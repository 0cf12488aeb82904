"""The lock's pure parts: decorator options, key function, tickets, settings."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from config.errors import ConfigError, InvalidMessage
from config.settings import load_settings
from tasks.distlock import user_lock
from tasks.distlock.decorator import LockSpec, message_user
from tasks.distlock.job import DROPPED_RESULT, PARKED_RESULT, SEQ, SINCE, ParkedJob, Ticket


def test_the_key_is_taken_from_the_message() -> None:
    spec = LockSpec(message_user, None, None)
    assert spec.user_of(({"user_id": "u1"},), {}) == "u1"
    assert spec.user_of((), {"message": {"user_id": "u2"}}) == "u2"
    with pytest.raises(InvalidMessage, match="lock key"):
        LockSpec(lambda m: m.get("tenant", ""), None, None).user_of(({"user_id": "u"},), {})


@pytest.mark.parametrize(("first", "words"), [
    ({"user_id": None}, "non-empty string, got None"),
    ({"user_id": ""}, "non-empty string"),
    ({"user_id": 42}, "non-empty string, got 42"),
    ({"user_id": "\ud800"}, "lone surrogate"),
    ({"user_id": "u" * 10_000}, "at most 1024"),
    ({}, "missing"),
    (None, "missing"),
])
def test_a_lock_key_that_names_no_user_is_refused_by_name(first: object, words: str) -> None:
    spec = LockSpec(message_user, None, None)
    with pytest.raises(InvalidMessage, match=words):
        spec.user_of((first,), {})
    with pytest.raises(InvalidMessage, match="key function failed: KeyError"):
        LockSpec(lambda m: m["tenant"], None, None).user_of(({"user_id": "u"},), {})
    assert spec.user_of(({"user_id": "ü-\x00-😀"},), {}) == "ü-\x00-😀"  # Redis takes it


def test_bad_decorator_options_are_refused_when_declared() -> None:
    with pytest.raises(ValueError, match="when_redis_down"):
        user_lock(when_redis_down="ignore")
    for ttl in (0, -1, float("nan"), float("inf"), "5", True, 10**9):
        with pytest.raises(ValueError, match="ttl"):
            user_lock(ttl=ttl)  # type: ignore[arg-type]


def test_the_decorated_function_keeps_its_signature_and_carries_its_spec() -> None:
    def work(self: object, message: dict[str, str]) -> str:
        """Doc."""
        return message["user_id"]

    wrapped = user_lock(ttl=5)(work)
    assert wrapped.__wrapped__ is work  # type: ignore[attr-defined]
    assert wrapped.__doc__ == "Doc."
    assert wrapped.__user_lock__.ttl == 5  # type: ignore[attr-defined]


def test_a_ticket_travels_in_headers() -> None:
    ticket = Ticket(seq=7, since=100.0)
    request = SimpleNamespace(headers=ticket.headers())
    assert Ticket.from_request(request) == ticket
    assert Ticket.from_request(SimpleNamespace(headers=None)) == Ticket()
    assert Ticket(since=100.0).waited(now=130.0) == 30.0 and Ticket().waited() == 0.0
    assert {SEQ, SINCE} <= set(ticket.headers())
    # A message of the previous design (per-user number + epoch) is numbered again.
    old = SimpleNamespace(headers={SEQ: 3, "recur_lock_epoch": "9", SINCE: 100.0})
    assert Ticket.from_request(old) == Ticket(seq=0, since=100.0)


def test_two_copies_of_a_job_park_as_one_entry() -> None:
    a = ParkedJob("t", "id1", [{"b": 1, "a": 2}], {}, 1.5, {"x": 1})
    b = ParkedJob("t", "id1", [{"a": 2, "b": 1}], {}, 1.5, {"x": 1})
    assert a.to_json() == b.to_json()
    assert ParkedJob.from_json(a.to_json()) == a


def test_parked_and_dropped_deliveries_are_their_own_celery_events(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker reports a parked delivery as ``task-parked`` (Flower: PARKED)."""
    from celery.worker.request import Request

    from tasks.distlock.job import ParkAwareRequest

    sent: list[tuple[str, dict[str, object]]] = []

    def celery_send(self: object, type: str, **fields: object) -> None:
        sent.append((type, fields))

    monkeypatch.setattr(Request, "send_event", celery_send)
    request = ParkAwareRequest.__new__(ParkAwareRequest)  # only send_event is exercised
    request.send_event("task-succeeded", result=repr(f"{PARKED_RESULT} user=u #3"))
    request.send_event("task-succeeded", result=repr(f"{DROPPED_RESULT} user=u #2"))
    request.send_event("task-succeeded", result="None")
    assert [t for t, _ in sent] == ["task-parked", "task-dropped", "task-succeeded"]
    assert sent[0][1]["info"] == f"{PARKED_RESULT} user=u #3"


def test_lock_settings_are_checked() -> None:
    cfg = load_settings({"RECUR_LOCK_TTL": "2.5", "RECUR_LOCK_WHEN_REDIS_DOWN": "run-unlocked"})
    assert (cfg.lock_ttl, cfg.lock_when_redis_down) == (2.5, "run-unlocked")
    with pytest.raises(ConfigError, match="RECUR_LOCK_WHEN_REDIS_DOWN"):
        load_settings({"RECUR_LOCK_WHEN_REDIS_DOWN": "maybe"})
    with pytest.raises(ConfigError, match="RECUR_LOCK_TTL"):
        load_settings({"RECUR_LOCK_TTL": "0"})
    with pytest.raises(ConfigError, match="RECUR_LOCK_CHAIN_SECONDS"):
        load_settings({"RECUR_LOCK_CHAIN_SECONDS": "-1"})
