"""Redis down while messages are processed (a private redis-server stopped, then started
again on its data, longer than the outage budget): each processing run that cannot hand
its result over hands its message back to its queue. Before, the run failed into the
dead-letter queue with its result never kept: the sender skipped its sequence number
after the gap timeout, and the dead letter's replay was then dropped as late. When
Redis is back every message is sent once, in order, none dead."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import routing.reseq.intake as intake
from routing.broker import queue_depth
from routing.reseq.intake import submit
from tests.support.private_redis import PrivateRedis
from tests.support.processes import wait_for
from tests.support.receiver import Receiver
from tests.support.resequencer_rig import Rig, rig_environment

pytestmark = pytest.mark.services

TOTAL = 8
#: Many times the budget the test gives a run to ride an outage out in place (1 s, as
#: tests/faults/test_outage_hand_back.py): every run in the outage hands its message back.
OUTAGE = 6.0


@pytest.fixture
def reseq_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)  # AOF: a restart keeps the resequencer's state
    server.start()
    yield server
    server.stop()


def test_results_kept_through_a_redis_outage_are_sent_once_in_order(
        celery_app: Any, broker: Any, tmp_path: Path, reseq_redis: PrivateRedis,
        monkeypatch: pytest.MonkeyPatch) -> None:
    with Receiver() as receiver:
        env = rig_environment(receiver, ["down"], redis_url=reseq_redis.url,
                              outage_budget="1", work_scale="20")  # 1 s a message
        env.pop("RECUR_RESEQ_STEPS")  # the bucket's simulated work: no Redis in the step
        rig = Rig(celery_app, env, tmp_path / "logs")
        monkeypatch.setattr(intake, "get_redis", lambda: reseq_redis.client)
        try:
            rig.processing_worker(concurrency=2)
            rig.sender_worker(concurrency=2)
            for i in range(TOTAL):
                submit("down", {"id": f"d{i}", "user_id": f"u{i}", "bucket": "short",
                                "payload": {"i": i}}, rig.cfg)
            reseq_redis.stop()  # mid-processing
            time.sleep(OUTAGE)  # the outage itself; nothing is awaited here
            reseq_redis.start()
            wait_for(lambda: len(receiver.seqs("down")) >= TOTAL, 90,
                     f"all {TOTAL} messages at the receiver")
        except BaseException:
            print(rig.logs())
            raise
        finally:
            rig.close()
    assert receiver.seqs("down") == list(range(1, TOTAL + 1)), "out of order or repeated"
    assert queue_depth(broker, "short.dead") == 0
