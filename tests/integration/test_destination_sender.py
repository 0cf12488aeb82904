"""A destination's refusals, one sender step at a time: real Redis, a real broker and a
real HTTP receiver, the sender loop called here (no Celery). An outage holds the
destination and is said once; a refusal of one message sets it aside durably and
replayably; one POST never takes longer than RECUR_SEND_TIMEOUT, however the
receiver trickles, and never reads an endless body."""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from kombu import Connection

from config import keys
from config.errors import BrokerUnavailable, DestinationUnavailable
from config.settings import load_settings
from routing.reseq.dead_letters import DeadLetter, list_letters, publish, queue_name, replay
from routing.reseq.outage import outage_ttl_ms
from routing.reseq.outbound import Delivery, post_once
from routing.reseq.sender import run_sender
from routing.reseq.state import Resequencer
from tests.support.processes import wait_for
from tests.support.receiver import Receiver

pytestmark = pytest.mark.services


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as r:
        yield r


@pytest.fixture
def dest() -> str:
    return f"d-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def reseq(redis_client: redis.Redis, receiver: Receiver, dest: str) -> Resequencer:
    cfg = load_settings({**os.environ, "RECUR_DESTINATIONS": f"{dest}:{receiver.url(dest)}",
                         "RECUR_RESEQ_GAP_TIMEOUT": "0.3", "RECUR_SEND_TIMEOUT": "1",
                         "RECUR_SEND_RETRIES": "1", "RECUR_SEND_BACKOFF": "0.05",
                         "RECUR_SEND_BACKOFF_MAX": "0.1"})
    return Resequencer(redis_client, cfg)


@pytest.fixture
def conn(celery_app: Any) -> Iterator[Connection]:
    with celery_app.connection_for_write() as connection:
        yield connection


def wake(_delay: float) -> None:
    """The sender's wake-ups are not needed: the test runs it again itself."""


def fill(reseq: Resequencer, dest: str, count: int) -> None:
    """``count`` processed messages m1.. (each entry keeps its message, as the task does)."""
    first = reseq.assign(dest, [f"m{i}" for i in range(1, count + 1)])
    for i in range(1, count + 1):
        message = {"id": f"m{i}", "user_id": "u1", "bucket": "short", "payload": {"i": i}}
        reseq.deposit(dest, first + i - 1, {"id": f"m{i}", "result": {"i": i},
                                            "message": message})


def run_until(reseq: Resequencer, dest: str, outcome: str, timeout: float = 5) -> None:
    """Run the sender (as its booked runs would) until one run ends with ``outcome``."""
    wait_for(lambda: run_sender(reseq, dest, wake) == outcome, timeout,
             f"a sender run of {dest} ending {outcome!r}")


def outage_records(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "routing.reseq.outage" and r.levelno == level]


def test_a_401_holds_the_destination_says_so_once_and_ends_when_it_accepts(
        reseq: Resequencer, dest: str, receiver: Receiver,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="routing.reseq.outage")
    fill(reseq, dest, 5)
    receiver.set(dest, status=401, body=b"token expired")
    for tries in (1, 2, 3):
        run_until(reseq, dest, "backoff")
        outage = reseq.status(dest).outage
        assert outage is not None and outage.tries == tries
    assert receiver.refused_seqs(dest) == [1, 1, 1], "not one try per run, or a later seq went"
    assert (outage.status, outage.seq, outage.kind) == (401, 1, "refused")
    assert outage.reason == "HTTP 401 Unauthorized: token expired"
    ttl = reseq.client.pttl(keys.reseq_outage(reseq.cfg.key_prefix, dest))
    assert 0 < ttl <= outage_ttl_ms(reseq.cfg)
    [error] = outage_records(caplog, logging.ERROR)
    assert f"destination {dest} is in outage: it answered HTTP 401 Unauthorized" in error
    assert "nothing is skipped" in error
    receiver.set(dest, status=0)
    run_until(reseq, dest, "idle")
    assert receiver.seqs(dest) == [1, 2, 3, 4, 5]
    status = reseq.status(dest)
    assert status.outage is None and (status.sent, status.skipped, status.dead_lettered) == (
        5, 0, 0)
    assert status.refused == {"401": 3}
    [recovered] = outage_records(caplog, logging.WARNING)
    assert f"destination {dest} answers again after" in recovered and "3 tries" in recovered
    assert len(outage_records(caplog, logging.ERROR)) == 1


@pytest.mark.parametrize("status", [301, 302, 307, 308, 403, 404, 410])
def test_redirects_and_not_found_are_outages_and_a_redirect_is_not_followed(
        reseq: Resequencer, dest: str, receiver: Receiver, status: int) -> None:
    fill(reseq, dest, 3)
    receiver.set(dest, status=status)
    run_until(reseq, dest, "backoff")
    run_until(reseq, dest, "backoff")
    assert receiver.refused_seqs(dest) == [1, 1]
    assert receiver.seqs(dest) == [] and receiver.seqs(f"{dest}/moved") == []
    assert receiver.seqs("moved") == [], "the redirect was followed"
    receiver.set(dest, status=0)
    run_until(reseq, dest, "idle")
    assert receiver.seqs(dest) == [1, 2, 3]
    assert reseq.status(dest).refused == {str(status): 2}


def test_more_statuses_can_be_outages(redis_client: redis.Redis, receiver: Receiver,
                                      dest: str) -> None:
    cfg = load_settings({**os.environ, "RECUR_DESTINATIONS": f"{dest}:{receiver.url(dest)}",
                         "RECUR_DESTINATION_OUTAGE_STATUSES": "409,423",
                         "RECUR_SEND_BACKOFF": "0.05", "RECUR_SEND_BACKOFF_MAX": "0.1"})
    reseq = Resequencer(redis_client, cfg)
    fill(reseq, dest, 2)
    receiver.set(dest, status=423)
    run_until(reseq, dest, "backoff")
    receiver.set(dest, status=0)
    run_until(reseq, dest, "idle")
    assert receiver.seqs(dest) == [1, 2] and reseq.status(dest).dead_lettered == 0


@pytest.mark.parametrize("status", [400, 413, 422, 409])
def test_a_message_the_destination_refuses_is_set_aside_and_the_rest_go_on_in_order(
        reseq: Resequencer, dest: str, receiver: Receiver, conn: Connection,
        status: int) -> None:
    fill(reseq, dest, 5)
    receiver.refuse(dest, 3, status)
    receiver.set(dest, body=b'{"error": "field x is wrong"}')
    run_until(reseq, dest, "idle")
    assert receiver.seqs(dest) == [1, 2, 4, 5]
    assert receiver.refused_seqs(dest) == [3], "a refusal of the message was retried"
    [dead] = list_letters(conn, dest)
    assert (dead.seq, dead.id, dead.status, dead.copies) == (3, "m3", status, 1)
    assert dead.reason.startswith(f"refused: HTTP {status} ")
    assert dead.reason.endswith(': {"error": "field x is wrong"}')
    assert dead.message == {"id": "m3", "user_id": "u1", "bucket": "short",
                            "payload": {"i": 3}}
    assert dead.result == {"i": 3}
    assert list_letters(conn, dest) == [dead], "listing took the record away"
    status_now = reseq.status(dest)
    assert (status_now.sent, status_now.skipped, status_now.dead_lettered) == (4, 0, 1)
    assert status_now.refused == {str(status): 1} and status_now.outage is None


def test_a_replay_submits_each_record_once_as_a_new_arrival_and_takes_it_away(
        reseq: Resequencer, dest: str, receiver: Receiver, conn: Connection) -> None:
    fill(reseq, dest, 3)
    receiver.refuse(dest, 2, 400)
    # A sender that published seq 2's record and died before recording it: the next one
    # is refused again and sets it aside again.
    publish(reseq.cfg, DeadLetter(dest, 2, "m2", "refused: HTTP 400 Bad Request", 400,
                                  time.time(), {"id": "m2"}))
    run_until(reseq, dest, "idle")
    [dead] = list_letters(conn, dest)
    assert (dead.seq, dead.copies) == (2, 2)

    def resubmit(one: DeadLetter) -> int:
        seq = reseq.assign(dest, [one.id])
        reseq.deposit(dest, seq, {"id": one.id, "result": "again", "message": one.message})
        return seq

    done = replay(conn, dest, resubmit)
    assert (done.submitted, done.repeats, done.left, done.stopped) == ([(2, 4, "m2")], 1, [],
                                                                       None)
    assert list_letters(conn, dest) == []
    run_until(reseq, dest, "idle")
    assert receiver.seqs(dest) == [1, 3, 4]
    assert receiver.of(dest)[-1].body["id"] == "m2"


def test_a_failed_step_and_an_unknown_destination_are_set_aside_too(
        reseq: Resequencer, dest: str, receiver: Receiver, conn: Connection) -> None:
    reseq.assign(dest, ["m1", "m2"])
    reseq.deposit(dest, 1, {"id": "m1", "failed": "ValueError: no", "message": {"id": "m1"},
                            "step": "my.step"})
    reseq.deposit(dest, 2, {"id": "m2", "result": 2, "message": {"id": "m2"}})
    unknown = Resequencer(reseq.client, load_settings({**os.environ}))  # no destinations
    run_until(unknown, dest, "idle")
    first, second = list_letters(conn, dest)
    assert (first.seq, first.status, first.reason, first.step) == (
        1, None, "failed: ValueError: no", "my.step")
    assert second.seq == 2 and "not in this sender's RECUR_DESTINATIONS" in second.reason
    assert receiver.seqs(dest) == [] and reseq.status(dest).dead_lettered == 2


def test_a_dead_letter_the_broker_does_not_take_holds_the_destination(
        reseq: Resequencer, dest: str, receiver: Receiver, conn: Connection) -> None:
    fill(reseq, dest, 2)
    receiver.refuse(dest, 1, 400)

    def broker_down(_: DeadLetter) -> None:
        raise BrokerUnavailable("broker: down for the test")

    assert run_sender(reseq, dest, wake, broker_down) == "backoff"
    assert reseq.status(dest).next_seq == 1 and receiver.seqs(dest) == []
    run_until(reseq, dest, "idle")
    assert receiver.seqs(dest) == [2] and [d.seq for d in list_letters(conn, dest)] == [1]


@pytest.mark.parametrize("body_only", [False, True], ids=["status-line", "body"])
def test_a_trickled_answer_is_given_up_at_the_send_timeout(
        reseq: Resequencer, dest: str, receiver: Receiver, body_only: bool) -> None:
    # A byte every 0.3 s: no single read waits as long as the 1 s timeout, so only a
    # deadline for the whole request stops it (the whole answer would take 20-30 s).
    receiver.set(dest, trickle=0.3, trickle_body=body_only)
    started = time.monotonic()
    with pytest.raises(DestinationUnavailable, match=r"no complete answer within 1s"):
        post_once(reseq.cfg.destinations[dest], Delivery(dest, 1, "m1", 0.0, None), reseq.cfg)
    took = time.monotonic() - started
    # Upper bound with room for a loaded machine: the whole answer would take 20-30 s.
    assert 0.9 <= took <= 3.0, f"the POST took {took:.2f}s against a 1 s timeout"
    wait_for(lambda: bool(receiver.trickled), 5, "the receiver to see the client hang up")
    [trickled] = receiver.trickled
    assert trickled.hung_up is not None and trickled.hung_up - trickled.started <= 2.5


def test_an_endless_body_is_not_read(reseq: Resequencer, dest: str,
                                     receiver: Receiver) -> None:
    url = reseq.cfg.destinations[dest]
    for status in (200, 400):
        receiver.set(dest, endless=True, status=status)
        started = time.monotonic()
        assert post_once(url, Delivery(dest, 1, "m1", 0.0, None), reseq.cfg) == status
        assert time.monotonic() - started < 1.5, "the body was read on"
    wait_for(lambda: len(receiver.endless_sent) == 2, 5, "the client to hang up twice")
    assert max(receiver.endless_sent) < 1 << 30


def test_listing_a_destination_without_dead_letters_creates_nothing(
        conn: Connection, dest: str) -> None:
    from routing.reseq.dead_letters import exists

    assert list_letters(conn, dest) == [] and not exists(conn, queue_name(dest))
    assert queue_name("x" * 300).startswith("outbound.dead.") and len(queue_name("x" * 300)) < 60


def test_a_record_that_cannot_be_replayed_stays_and_an_unknown_destination_stops_the_replay(
        reseq: Resequencer, dest: str, conn: Connection) -> None:
    from config.errors import UnknownDestination
    from routing.reseq.dead_letters import dead_queue

    publish(reseq.cfg, DeadLetter(dest, 1, "m1", "refused: HTTP 400", 400, time.time()))
    with conn.channel() as channel:
        channel.basic_publish(channel.prepare_message(b"not json"), exchange="",
                              routing_key=dead_queue(dest, reseq.cfg).name)
    unreadable, kept = list_letters(conn, dest)
    assert unreadable.seq == 0 and unreadable.reason.startswith("unreadable dead letter")
    assert kept.seq == 1 and kept.message is None
    done = replay(conn, dest, lambda _: 99)
    assert done.submitted == [] and [why for _, why in done.left] == [
        "its message was not kept (a record from before replays, or unreadable)"] * 2
    publish(reseq.cfg, DeadLetter(dest, 2, "m2", "refused: HTTP 400", 400, time.time(),
                                  {"id": "m2"}))

    def unknown(_: DeadLetter) -> int:
        raise UnknownDestination("destination", f"unknown destination {dest!r}")

    with pytest.raises(UnknownDestination):
        replay(conn, dest, unknown)
    assert [d.seq for d in list_letters(conn, dest)] == [0, 1, 2], "a record was lost"


def test_the_dead_commands_need_a_bucket_or_a_destination(tmp_path: Any) -> None:
    from tests.integration.test_cli_errors import error_lines, run_recur

    for args in (["dead", "list"], ["dead", "replay"],
                 ["dead", "list", "short", "--destination", "x"]):
        result = run_recur(args, {}, tmp_path)
        assert result.returncode == 2, (args, result.stdout)
        assert error_lines(result) == [
            "recur: give a BUCKET or --destination DESTINATION (one of them)"], args
    down = run_recur(["dead", "list", "--destination", "x"],
                     {"RECUR_BROKER_URL": "amqp://guest:wrong@127.0.0.1:5672//"}, tmp_path)
    assert down.returncode == 2 and "Traceback" not in down.stderr
    [line] = error_lines(down)
    assert line.startswith("recur: broker ")


@pytest.mark.parametrize("result", [float("nan"), {"x": float("inf")}, "lone \ud800"],
                         ids=["nan", "inf", "surrogate"])
def test_a_buffered_result_that_is_not_strict_json_is_set_aside_not_wedging_the_sender(
        reseq: Resequencer, dest: str, receiver: Receiver, conn: Connection,
        result: Any) -> None:
    first = reseq.assign(dest, ["m1", "m2", "m3"])
    for i in (1, 2, 3):  # m2's result buffered as it was before steps refused such results
        reseq.deposit(dest, first + i - 1, {"id": f"m{i}", "result": result if i == 2 else i,
                                            "message": {"id": f"m{i}"}})
    run_until(reseq, dest, "idle")
    assert receiver.seqs(dest) == [1, 3]
    [dead] = list_letters(conn, dest)
    assert (dead.seq, dead.id) == (2, "m2") and "cannot be sent as JSON" in dead.reason
