"""The resequencer end to end: real Redis, RabbitMQ, worker processes and a real
HTTP receiver. Messages are processed in parallel, out of order, and each
destination still receives them in arrival order, each sequence number once."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from config import keys
from config.errors import InvalidMessage, ResequencerFull, UnknownDestination
from routing.reseq.dead_letters import DeadLetter, list_letters
from routing.reseq.intake import submit, submit_batch
from routing.reseq.state import Resequencer
from tasks.cli import cli
from tests.support.processes import wait_for
from tests.support.receiver import Receiver
from tests.support.resequencer_rig import Rig, rig_environment
from tests.support.resequencer_work import ASYNC_STEP

pytestmark = pytest.mark.services

DESTINATIONS = ["bulk", "a", "b", "async", "slow", "failing", "batchfail", "gappy", "flaky", "full",
                "refuse"]
GAP_TIMEOUT = 3.0


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with Receiver() as r:
        yield r


@pytest.fixture(scope="module")
def rig(celery_app: Any, receiver: Receiver,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    """Two processing workers (2 processes each) and one sender worker (4 threads)."""
    env = rig_environment(receiver, DESTINATIONS, reseq_gap_timeout=str(GAP_TIMEOUT),
                          send_timeout="2", send_retries="2", send_backoff="0.05",
                          send_backoff_max="0.3", reseq_capacity="4000")
    rig = Rig(celery_app, env, Path(tmp_path_factory.mktemp("reseq-logs")))
    try:
        for _ in range(2):
            rig.processing_worker(concurrency=2)
        rig.sender_worker(concurrency=4)
        yield rig
    finally:
        rig.close()


@pytest.fixture
def reseq(rig: Rig, redis_client: redis.Redis) -> Resequencer:
    return Resequencer(redis_client, rig.cfg)


def message(i: int, **payload: Any) -> dict[str, Any]:
    return {"id": f"m{i}", "user_id": f"u{i % 7}", "bucket": "short",
            "payload": {"i": i, **payload}}


def stored_results(reseq: Resequencer) -> int:
    """Task results in the result backend under this run's prefix."""
    pattern = f"{keys.celery_prefix(reseq.cfg.key_prefix)}celery-task-meta-*"
    return sum(1 for _ in reseq.client.scan_iter(match=pattern, count=1000))


def dead_letters(celery_app: Any, destination: str) -> list[DeadLetter]:
    """The destination's dead letters (left in place)."""
    with celery_app.connection_for_write() as conn:
        return list_letters(conn, destination)


def wait_received(receiver: Receiver, destination: str, count: int, timeout: float,
                  rig: Rig) -> None:
    try:
        wait_for(lambda: len(set(receiver.seqs(destination))) >= count, timeout,
                 f"{count} distinct sequence numbers at {destination}")
    except TimeoutError:
        print(rig.logs())
        raise


def test_a_thousand_messages_arrive_in_order_exactly_once(
        rig: Rig, receiver: Receiver, reseq: Resequencer) -> None:
    results_before = stored_results(reseq)
    for start in range(0, 1000, 100):  # ten chords of a hundred
        accepted = submit_batch("bulk", [message(i) for i in range(start, start + 100)],
                                rig.cfg)
        assert [a.seq for a in accepted] == list(range(start + 1, start + 101))
    wait_received(receiver, "bulk", 1000, 90, rig)
    assert receiver.seqs("bulk") == list(range(1, 1001))
    assert [r.body["id"] for r in receiver.of("bulk")] == [f"m{i}" for i in range(1000)]
    status = reseq.status("bulk")
    assert (status.next_seq, status.sent, status.skipped, status.buffered) == (1001, 1000, 0, 0)
    wait_for(lambda: stored_results(reseq) == results_before, 10,
             "the chord bodies to drop their header results")


def test_destinations_keep_their_own_order_and_a_slow_one_delays_no_other(
        rig: Rig, receiver: Receiver) -> None:
    receiver.set("slow", delay=0.25)  # 30 sends take 7.5 s there
    for i in range(30):
        for destination in ("a", "slow", "b"):
            submit(destination, message(i), rig.cfg)
    wait_received(receiver, "a", 30, 30, rig)
    wait_received(receiver, "b", 30, 30, rig)
    assert len(receiver.seqs("slow")) < 30, "the fast destinations waited for the slow one"
    wait_received(receiver, "slow", 30, 60, rig)
    for destination in ("a", "b", "slow"):
        assert receiver.seqs(destination) == list(range(1, 31)), destination


def test_a_message_that_always_fails_is_set_aside_reported_and_later_ones_flow(
        rig: Rig, receiver: Receiver, reseq: Resequencer, celery_app: Any) -> None:
    for i in range(10):
        submit("failing", message(i, fail=(i == 3)), rig.cfg)
    wait_for(lambda: reseq.status("failing").next_seq == 11, 30, "all ten handled")
    assert receiver.seqs("failing") == [1, 2, 3, 5, 6, 7, 8, 9, 10]
    status = reseq.status("failing")
    assert (status.sent, status.skipped, status.dead_lettered) == (9, 0, 1)
    assert reseq.skipped("failing") == []
    [record] = dead_letters(celery_app, "failing")
    assert record.seq == 4 and record.id == "m3" and record.message == message(3, fail=True)
    assert record.reason.startswith("failed: ValueError") and "always fails" in record.reason
    shown = CliRunner().invoke(cli, ["resequencer", "status", "failing", "--skipped", "5"])
    assert shown.exit_code == 0, shown.output
    assert shown.output.splitlines() == [
        "destination failing: next=11 assigned=10 buffered=0 in_flight=0 sent=9 skipped=0 dead=1 "
        "late=0 sender=idle"]


def test_a_failing_message_in_a_batch_is_set_aside_and_the_rest_of_its_chord_is_sent(
        rig: Rig, receiver: Receiver, reseq: Resequencer, celery_app: Any) -> None:
    # The chord's body never runs (a header task failed); the header tasks had
    # already handed their results over, so nothing else is lost.
    submit_batch("batchfail", [message(i, fail=(i == 3)) for i in range(10)], rig.cfg)
    wait_for(lambda: reseq.status("batchfail").next_seq == 11, 30, "all ten handled")
    assert receiver.seqs("batchfail") == [1, 2, 3, 5, 6, 7, 8, 9, 10]
    assert [d.seq for d in dead_letters(celery_app, "batchfail")] == [4]


def test_a_gap_that_stays_open_past_the_timeout_is_skipped_and_its_late_result_dropped(
        rig: Rig, receiver: Receiver, reseq: Resequencer) -> None:
    late = GAP_TIMEOUT + 3
    for i in range(5):
        submit("gappy", message(i, **({"sleep": late} if i == 1 else {})), rig.cfg)
    wait_received(receiver, "gappy", 4, 30, rig)
    assert receiver.seqs("gappy") == [1, 3, 4, 5]
    [record] = reseq.skipped("gappy")
    assert record["seq"] == 2 and record["reason"].startswith("timeout")
    wait_for(lambda: reseq.status("gappy").late == 1, late + 10, "the late result to arrive")
    assert receiver.seqs("gappy") == [1, 3, 4, 5], "a skipped sequence number was sent late"


def test_a_receiver_that_answers_503_for_a_while_gets_everything_in_order_later(
        rig: Rig, receiver: Receiver) -> None:
    receiver.set("flaky", unavailable=True)
    for i in range(20):
        submit("flaky", message(i), rig.cfg)
    wait_for(lambda: sum(d == "flaky" for d, _ in receiver.rejected) >= 6, 30,
             "several refused tries")
    assert {seq for d, seq in receiver.rejected if d == "flaky"} == {1}, \
        "a later message was sent while the first was being retried"
    receiver.set("flaky", unavailable=False)
    wait_received(receiver, "flaky", 20, 30, rig)
    assert receiver.seqs("flaky") == list(range(1, 21))


def test_a_receiver_that_refuses_a_message_with_4xx_does_not_block_the_rest(
        rig: Rig, receiver: Receiver, reseq: Resequencer, celery_app: Any) -> None:
    # A 422 is about the message: it is set aside (replayable) with the status as reason.
    receiver.refuse("refuse", 2, 422)
    for i in range(4):
        submit("refuse", message(i), rig.cfg)
    wait_received(receiver, "refuse", 3, 30, rig)
    assert receiver.seqs("refuse") == [1, 3, 4]
    assert receiver.rejected.count(("refuse", 2)) == 1, "a 4xx was retried"
    wait_for(lambda: reseq.status("refuse").next_seq == 5, 10, "all four handled")
    [dead] = dead_letters(celery_app, "refuse")
    assert (dead.seq, dead.status, dead.reason) == (2, 422,
                                                    "refused: HTTP 422 Unprocessable Entity")
    assert reseq.skipped("refuse") == []


def test_intake_pushes_back_at_capacity(rig: Rig, receiver: Receiver,
                                        reseq: Resequencer) -> None:
    small = Resequencer(reseq.client, dataclasses.replace(rig.cfg, reseq_capacity=4))
    with pytest.raises(ResequencerFull, match="capacity of 4"):
        small.assign("full", [f"m{i}" for i in range(5)])
    assert reseq.status("full").assigned == 0
    submit_batch("full", [message(i, sleep=1.5) for i in range(4)], small.cfg)
    with pytest.raises(ResequencerFull, match="'full' holds 4 unsent"):
        submit("full", message(4), small.cfg)
    wait_received(receiver, "full", 4, 30, rig)
    wait_for(lambda: reseq.status("full").next_seq == 5, 10, "the four recorded as sent")
    assert submit("full", message(4), small.cfg).seq == 5


@pytest.mark.parametrize(("destination", "bad", "field", "words"), [
    ("nowhere", message(1), "destination", "unknown destination 'nowhere'"),
    ("a", message(1, blob="x" * 2000), "payload", "over the limit"),
    ("a", {"id": "m1", "bucket": "short", "payload": 1}, "user_id", "missing"),
])
def test_bad_input_is_refused_at_submit_and_nothing_is_numbered(
        rig: Rig, reseq: Resequencer, destination: str, bad: dict[str, Any], field: str,
        words: str) -> None:
    before = reseq.status(destination).assigned
    with pytest.raises(InvalidMessage) as caught:
        submit(destination, bad, rig.cfg)
    assert caught.value.field == field and words in str(caught.value)
    assert isinstance(caught.value, UnknownDestination) == (field == "destination")
    assert reseq.status(destination).assigned == before


def test_a_step_that_is_not_registered_is_logged_when_the_worker_starts(
        start_worker: Any) -> None:
    child, _ = start_worker("short", concurrency=1, env={
        "RECUR_DESTINATIONS": "x:http://127.0.0.1:9/x", "RECUR_RESEQ_STEPS": "x:no.such.step"})
    wait_for(lambda: "resequencer warm-up failed: RECUR_RESEQ_STEPS: destination 'x': task "
             "'no.such.step' is not registered" in child.log(), 30,
             "the warm-up error in the worker's log")


def test_a_step_given_per_call_may_be_async(rig: Rig, receiver: Receiver) -> None:
    for i in range(20):
        submit("async", message(1000 + i), rig.cfg, step=ASYNC_STEP)
    wait_received(receiver, "async", 20, 60, rig)
    results = [r.body["result"] for r in receiver.of("async")]
    assert [r["processed"] for r in results] == [f"m{1000 + i}" for i in range(20)]
    assert {r["thread"] for r in results} == {"recur-asyncio"}
