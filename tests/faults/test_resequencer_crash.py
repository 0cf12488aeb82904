"""``kill -9`` of a processing worker and of the sender mid-stream: the receiver still
gets every sequence number in order, and the one re-send after the sender's crash
carries the same sequence number (and body) as the send it repeats."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from routing.intake import submit_batch
from routing.resequencer import Resequencer
from tasks.processes import wait_for
from tasks.redis_conn import get_redis
from tests.support.receiver import Receiver
from tests.support.resequencer_rig import Rig, rig_environment
from tests.support.resequencer_work import attempts_key

pytestmark = pytest.mark.services

TOTAL = 400
HELD_SEQ = 150  # the receiver answers this one slowly: the sender is killed mid-request


def batches(start: int, stop: int) -> list[list[dict[str, Any]]]:
    return [[{"id": f"m{i}", "user_id": f"u{i % 5}", "bucket": "short", "payload": {"i": i}}
             for i in range(first, min(first + 10, stop))] for first in range(start, stop, 10)]


def test_kill_9_mid_stream_keeps_order_and_loses_nothing(celery_app: Any,
                                                         tmp_path: Path) -> None:
    with Receiver() as receiver:
        env = rig_environment(receiver, ["crash"], reseq_gap_timeout="60", send_timeout="2",
                              send_retries="3", send_backoff="0.1", send_backoff_max="0.5")
        rig = Rig(celery_app, env, tmp_path / "logs")
        try:
            run_the_crashes(rig, receiver)
        except BaseException:
            print(rig.logs())
            raise
        finally:
            rig.close()
        (tmp_path / "all.log").write_text(rig.logs())
        check_what_arrived(receiver, Resequencer(get_redis(), rig.cfg))


def run_the_crashes(rig: Rig, receiver: Receiver) -> None:
    victim, _ = rig.processing_worker(concurrency=2)
    rig.processing_worker(concurrency=2)
    sender, _ = rig.sender_worker(concurrency=2)
    in_request = receiver.hold("crash", HELD_SEQ, 3.0)
    for batch in batches(0, TOTAL // 2):
        submit_batch("crash", batch, rig.cfg)
    assert in_request.wait(60), "the sender never reached the held sequence number"
    for batch in batches(TOTAL // 2, TOTAL):
        submit_batch("crash", batch, rig.cfg)
    victim.kill9()  # it holds prefetched and running messages of the second half
    sender.kill9()  # mid-request: the receiver gets seq HELD_SEQ, the sender never knows
    rig.processing_worker(concurrency=2)
    rig.sender_worker(concurrency=2)
    wait_for(lambda: len(set(receiver.seqs("crash"))) == TOTAL, 90,
             f"all {TOTAL} sequence numbers at the receiver")


def check_what_arrived(receiver: Receiver, reseq: Resequencer) -> None:
    seqs = receiver.seqs("crash")
    assert seqs == sorted(seqs), "sent out of order"
    assert set(seqs) == set(range(1, TOTAL + 1)), "a sequence number is missing"
    repeated = {seq for seq, n in Counter(seqs).items() if n > 1}
    assert HELD_SEQ in repeated, "the interrupted send was not repeated"
    for seq in repeated:
        bodies = [r.body for r in receiver.of("crash") if r.seq == seq]
        assert all(b == bodies[0] for b in bodies), f"seq {seq} re-sent with another body"
    status = reseq.status("crash")
    assert (status.next_seq, status.skipped, status.buffered) == (TOTAL + 1, 0, 0)
    attempts = reseq.client.mget([attempts_key(f"m{i}") for i in range(TOTAL)])
    assert max(int(n or 0) for n in attempts) >= 2, "the killed worker was running nothing"
