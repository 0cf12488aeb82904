"""The resequencer's Redis state and sender loop, against the real Redis and a real
HTTP receiver, without Celery: each atomic step and each race it closes."""

from __future__ import annotations

import dataclasses
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from config.errors import ResequencerFull, ServiceUnavailable
from config.settings import load_settings
from routing.reseq import sender
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
                         "RECUR_RESEQ_CAPACITY": "10", "RECUR_RESEQ_GAP_TIMEOUT": "0.3",
                         "RECUR_SEND_TIMEOUT": "2", "RECUR_SEND_RETRIES": "1",
                         "RECUR_SEND_BACKOFF": "0.05", "RECUR_SEND_BACKOFF_MAX": "0.1"})
    return Resequencer(redis_client, cfg)


class Wakes(list[float]):
    """The sender's wake-up requests, recorded and booked as the send task books them."""

    def __init__(self, reseq: Resequencer, dest: str) -> None:
        super().__init__()
        self.reseq, self.dest = reseq, dest

    def __call__(self, delay: float) -> None:
        self.append(delay)
        if delay > 0:
            self.reseq.book_wake(self.dest, delay)


def entry(i: int) -> dict[str, object]:
    return {"id": f"m{i}", "result": {"i": i}}


def test_sequence_numbers_are_consecutive_and_capacity_refuses_without_numbering(
        reseq: Resequencer, dest: str) -> None:
    assert reseq.assign(dest, ["m1", "m2", "m3"]) == 1
    assert reseq.assign(dest, ["m4"]) == 4
    with pytest.raises(ResequencerFull, match=f"{dest!r} holds 4 unsent message"):
        reseq.assign(dest, [f"x{i}" for i in range(7)])
    assert reseq.assign(dest, [f"y{i}" for i in range(6)]) == 5  # exactly at capacity
    assert reseq.status(dest).assigned == 10
    assert dest in reseq.destinations()


def test_deposit_says_when_to_start_a_sender(reseq: Resequencer, dest: str) -> None:
    reseq.assign(dest, ["m1", "m2", "m3", "m4"])
    assert reseq.deposit(dest, 2, entry(2)) == "kick"  # a gap: a sender books its timeout
    assert reseq.book_wake(dest, 5) is not None
    assert reseq.deposit(dest, 3, entry(3)) == "queued"  # the booked run covers it
    reseq.client.set(reseq.key(dest, "wake"), 1)  # a booking whose time has passed
    assert reseq.deposit(dest, 4, entry(4)) == "kick"
    assert reseq.deposit(dest, 1, entry(1)) == "kick"  # the next one is ready
    assert reseq.acquire(dest, "me")
    assert reseq.deposit(dest, 1, {"id": "m1", "result": "again"}) == "queued"
    assert reseq.peek(dest).entry == entry(1), "a repeated deposit replaced the first"
    assert reseq.advance(dest, "me", 1) == "ok"
    assert reseq.deposit(dest, 1, entry(1)) == "late"
    assert reseq.deposit(dest, 1, entry(1), count_late=False) == "late"
    assert reseq.status(dest).late == 1


def test_only_the_lock_owner_advances_and_only_in_step(reseq: Resequencer, dest: str) -> None:
    reseq.assign(dest, ["m1", "m2"])
    reseq.deposit(dest, 1, entry(1))
    assert reseq.acquire(dest, "owner") and not reseq.acquire(dest, "other")
    assert reseq.advance(dest, "other", 1) == "not-owner"
    assert reseq.advance(dest, "owner", 2) == "out-of-step"
    assert reseq.advance(dest, "owner", 1) == "ok"
    assert reseq.advance(dest, "owner", 1) == "out-of-step", "seq 1 recorded twice"
    reseq.deposit(dest, 2, entry(2))
    skip = {"seq": 2, "id": "m2", "reason": "timeout"}
    assert reseq.advance(dest, "owner", 2, skip, only_if_absent=True) == "arrived"
    assert reseq.status(dest).next_seq == 2


def test_release_keeps_the_lock_when_the_next_one_became_ready(reseq: Resequencer,
                                                               dest: str) -> None:
    reseq.assign(dest, ["m1", "m2"])
    assert reseq.acquire(dest, "me")
    reseq.deposit(dest, 1, entry(1))  # arrives while the sender is finishing
    assert reseq.release(dest, "me") == "more"
    assert reseq.advance(dest, "me", 1) == "ok"
    assert reseq.release(dest, "me") == "released"
    assert reseq.deposit(dest, 2, entry(2)) == "kick"
    assert reseq.release(dest, "me") == "not-owner"


def test_release_keeps_the_lock_while_results_wait_behind_an_untimed_gap(
        reseq: Resequencer, dest: str) -> None:
    reseq.assign(dest, ["m1", "m2"])
    assert reseq.acquire(dest, "me")
    reseq.deposit(dest, 2, entry(2))  # arrives after the sender saw nothing waiting
    assert reseq.release(dest, "me") == "more", "nobody would time the gap at 1"
    reseq.book_wake(dest, 5)
    assert reseq.release(dest, "me") == "released"


def test_a_booked_wake_covers_later_ones_not_earlier_ones(reseq: Resequencer,
                                                          dest: str) -> None:
    assert reseq.book_wake(dest, 10) == 10
    assert reseq.book_wake(dest, 20) is None
    assert reseq.book_wake(dest, 2) == 2


def test_the_sender_sends_in_order_and_skips_a_gap_after_the_timeout(
        reseq: Resequencer, dest: str, receiver: Receiver) -> None:
    reseq.assign(dest, [f"m{i}" for i in range(1, 6)])
    for i in (5, 3, 2):
        reseq.deposit(dest, i, entry(i))
    wakes = Wakes(reseq, dest)
    assert run_sender(reseq, dest, wakes) == "idle"
    assert receiver.seqs(dest) == [] and wakes and 0 < wakes[0] <= 0.3
    reseq.deposit(dest, 1, entry(1))
    assert run_sender(reseq, dest, wakes) == "idle"
    assert receiver.seqs(dest) == [1, 2, 3], "sent past the open gap at 4"
    # Each run before the gap timed out leaves it open; once it has, 4 is skipped.
    wait_for(lambda: run_sender(reseq, dest, wakes) == "idle"
             and 5 in receiver.seqs(dest), 5, "the gap at 4 to time out")
    assert receiver.seqs(dest) == [1, 2, 3, 5]
    assert [r["seq"] for r in reseq.skipped(dest)] == [4]
    first = receiver.of(dest)[0].body
    assert first == {"destination": dest, "seq": 1, "id": "m1",
                     "arrived_at": first["arrived_at"], "result": {"i": 1}}
    assert abs(first["arrived_at"] - time.time()) < 60


def test_a_sender_that_died_before_recording_is_followed_by_the_same_seq_again(
        reseq: Resequencer, dest: str, receiver: Receiver) -> None:
    from routing.reseq.outbound import Delivery, post_once

    reseq.assign(dest, ["m1", "m2"])
    reseq.deposit(dest, 1, entry(1))
    reseq.deposit(dest, 2, entry(2))
    # A sender took the lock, sent seq 1, and died before advance: its lock expires.
    assert reseq.acquire(dest, "dead")
    nxt = reseq.peek(dest)
    assert nxt.pending is not None
    post_once(reseq.cfg.destinations[dest], Delivery(dest, 1, "m1", nxt.pending["t"] / 1000,
                                                     {"i": 1}), reseq.cfg)
    wakes = Wakes(reseq, dest)
    assert run_sender(reseq, dest, wakes) == "busy" and wakes
    reseq.client.delete(reseq.key(dest, "sender"))  # the TTL ran out
    assert run_sender(reseq, dest, wakes) == "idle"
    assert receiver.seqs(dest) == [1, 1, 2]
    first, again, _ = receiver.of(dest)
    assert first.body == again.body, "the re-send differs from the first send"


def test_a_destination_that_stays_down_backs_off_and_keeps_its_place(
        reseq: Resequencer, dest: str, receiver: Receiver) -> None:
    reseq.assign(dest, ["m1", "m2"])
    reseq.deposit(dest, 1, entry(1))
    reseq.deposit(dest, 2, entry(2))
    receiver.set(dest, unavailable=True)
    wakes = Wakes(reseq, dest)
    assert run_sender(reseq, dest, wakes) == "backoff"
    assert wakes == [reseq.cfg.send_backoff_max]
    assert receiver.rejected == [(dest, 1), (dest, 1)]  # one try and one retry
    # The lock is held through the backoff, so deposits start no sender meanwhile.
    assert reseq.status(dest).sender_active and reseq.status(dest).next_seq == 1
    receiver.set(dest, unavailable=False)
    wait_for(lambda: run_sender(reseq, dest, wakes) == "idle", 5,
             "the booked run after the backoff")
    assert receiver.seqs(dest) == [1, 2]
    assert dataclasses.astuple(reseq.status(dest))[1:8] == (3, 2, 0, 0, 2, 0, 0)


def test_a_long_run_hands_its_turn_back(reseq: Resequencer, dest: str, receiver: Receiver,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sender, "TURN_SECONDS", 0.0)
    reseq.assign(dest, ["m1", "m2"])
    reseq.deposit(dest, 1, entry(1))
    reseq.deposit(dest, 2, entry(2))
    wakes = Wakes(reseq, dest)
    assert run_sender(reseq, dest, wakes) == "turn-over"
    assert receiver.seqs(dest) == [1] and wakes == [0]
    assert not reseq.status(dest).sender_active
    assert run_sender(reseq, dest, wakes) == "turn-over"
    assert receiver.seqs(dest) == [1, 2]


def test_redis_unreachable_is_our_error_naming_redis(reseq: Resequencer, dest: str) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = redis.Redis(port=port, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))
    down = Resequencer(client, reseq.cfg)
    with pytest.raises(ServiceUnavailable, match=r"Redis: resequencer cannot run intake\.lua"):
        down.assign(dest, ["m1"])
    with pytest.raises(ServiceUnavailable, match="cannot read a destination's status"):
        down.status(dest)


def test_each_lease_has_a_higher_fence_and_a_dead_holders_lease_runs_out(
        reseq: Resequencer, dest: str) -> None:
    assert reseq.acquire(dest, "first") == 1 and reseq.acquire(dest, "other") == 0
    assert 0 < reseq.lock_left_ms(dest) <= reseq.cfg.sender_lease * 1000
    assert reseq.holder(dest) == "first"
    assert reseq.release(dest, "first", force=True) == "released"
    assert reseq.acquire(dest, "second") == 2


def test_a_send_longer_than_the_lease_keeps_it_and_carries_its_fence(
        reseq: Resequencer, dest: str, receiver: Receiver) -> None:
    reseq = Resequencer(reseq.client, dataclasses.replace(reseq.cfg, sender_lease=0.6))
    reseq.assign(dest, ["m1", "m2"])
    reseq.deposit(dest, 1, entry(1))
    reseq.deposit(dest, 2, entry(2))
    in_request = receiver.hold(dest, 1, 1.5)  # 2.5 leases; within RECUR_SEND_TIMEOUT
    outcome: list[str] = []
    thread = threading.Thread(target=lambda: outcome.append(
        run_sender(reseq, dest, Wakes(reseq, dest))))
    thread.start()
    assert in_request.wait(10) and reseq.holder(dest) is not None
    thread.join(10)
    # Had the lease run out mid-send, recording seq 1 would have failed ('lost') and
    # seq 2 would not have gone out under the same fence.
    assert outcome == ["idle"] and receiver.seqs(dest) == [1, 2]
    assert {r.fence for r in receiver.of(dest)} == {1}


def test_a_late_send_of_an_earlier_lease_is_fenced_off(
        reseq: Resequencer, dest: str, receiver: Receiver) -> None:
    from routing.reseq.outbound import Delivery, post_once

    reseq.assign(dest, ["m1", "m2"])
    for i in (1, 2):  # one lease per run: seq 1 goes out with fence 1, seq 2 with fence 2
        reseq.deposit(dest, i, entry(i))
        assert run_sender(reseq, dest, Wakes(reseq, dest)) == "idle"
    assert [(r.seq, r.fence) for r in receiver.of(dest)] == [(1, 1), (2, 2)]
    # The first holder, paused past its lease, finishes a POST it had started.
    late = Delivery(dest, 1, "m1", 0.0, {"i": 1}, fence=1)
    assert post_once(reseq.cfg.destinations[dest], late, reseq.cfg) == 409
    assert receiver.fenced == [(dest, 1)] and receiver.seqs(dest) == [1, 2]
