"""``kill -9`` of a processing worker and of the sender mid-stream, with the default
settings: the destination resumes within 5 s (the killed sender's lease runs out,
the surviving outbound worker takes over), the receiver gets every sequence
number once and in order, and the killed sender's request, answered only after
the takeover, carries the old lease's fence and is refused."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from routing.redis_client import get_redis
from routing.reseq.intake import submit_batch
from routing.reseq.lease import holder_pid
from routing.reseq.state import Resequencer
from tests.support.processes import Child, wait_for
from tests.support.receiver import Receiver
from tests.support.resequencer_rig import Rig, rig_environment
from tests.support.resequencer_work import attempts_key

pytestmark = pytest.mark.services

TOTAL = 400
HELD_SEQ = 150  # the receiver answers this one slowly: the sender is killed mid-request
HELD_SECONDS = 10.0  # longer than a takeover may take: the dead sender's answer comes last
RESUME_SECONDS = 5.0


def batches(start: int, stop: int) -> list[list[dict[str, Any]]]:
    return [[{"id": f"m{i}", "user_id": f"u{i % 5}", "bucket": "short", "payload": {"i": i}}
             for i in range(first, min(first + 10, stop))] for first in range(start, stop, 10)]


def test_kill_9_mid_stream_resumes_within_seconds_in_order_once(celery_app: Any,
                                                                tmp_path: Path) -> None:
    with Receiver() as receiver:
        rig = Rig(celery_app, rig_environment(receiver, ["crash"]), tmp_path / "logs")
        try:
            killed_at = run_the_crashes(rig, receiver)
        except BaseException:
            print(rig.logs())
            raise
        finally:
            rig.close()
        (tmp_path / "all.log").write_text(rig.logs())
        check_what_arrived(receiver, Resequencer(get_redis(), rig.cfg), killed_at)


def run_the_crashes(rig: Rig, receiver: Receiver) -> float:
    """Kill a processing worker and the sender mid-request; when the sender died."""
    victim, _ = rig.processing_worker(concurrency=2)
    rig.processing_worker(concurrency=2)
    senders = [rig.sender_worker(concurrency=2)[0] for _ in range(2)]
    in_request = receiver.hold("crash", HELD_SEQ, HELD_SECONDS)
    for batch in batches(0, TOTAL // 2):
        submit_batch("crash", batch, rig.cfg)
    assert in_request.wait(60), "the sender never reached the held sequence number"
    sender = holding_sender(senders, Resequencer(get_redis(), rig.cfg))
    killed_at = time.time()
    sender.kill9()  # mid-request: the receiver answers seq HELD_SEQ after the takeover
    for batch in batches(TOTAL // 2, TOTAL):
        submit_batch("crash", batch, rig.cfg)
    victim.kill9()  # it holds prefetched and running messages of the second half
    rig.processing_worker(concurrency=2)
    wait_for(lambda: len(set(receiver.seqs("crash"))) == TOTAL and bool(receiver.fenced), 120,
             f"all {TOTAL} sequence numbers at the receiver, and the dead sender's answer")
    return killed_at


def holding_sender(senders: list[Child], reseq: Resequencer) -> Child:
    """The outbound worker whose sender holds the destination's lease."""
    token = reseq.holder("crash")
    assert token is not None, "no sender holds the destination mid-request"
    return next(c for c in senders if c.pid == holder_pid(token))


def check_what_arrived(receiver: Receiver, reseq: Resequencer, killed_at: float) -> None:
    assert receiver.seqs("crash") == list(range(1, TOTAL + 1)), "out of order or repeated"
    resumed = min(r.at for r in receiver.of("crash") if r.seq == HELD_SEQ) - killed_at
    assert resumed <= RESUME_SECONDS, f"the destination resumed {resumed:.1f}s after the kill"
    # The killed sender's request reached the receiver and was answered after the
    # takeover: its lease's fence is lower than the new sender's, so it was refused.
    assert receiver.fenced == [("crash", HELD_SEQ)]
    status = reseq.status("crash")
    assert (status.next_seq, status.skipped, status.buffered) == (TOTAL + 1, 0, 0)
    attempts = reseq.client.mget([attempts_key(f"m{i}") for i in range(TOTAL)])
    assert max(int(n or 0) for n in attempts) >= 2, "the killed worker was running nothing"
