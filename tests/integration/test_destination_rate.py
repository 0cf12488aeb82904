"""A destination's own rate (RECUR_DESTINATIONS ``rate=``): real Redis, a real HTTP
receiver; the sender loop called here (no Celery), then real worker processes. Every
POST the partner sees, retries too, stays within rate + burst in any 1-second window;
every message arrives once and in order; none is set aside for waiting; the waits are
counted where ``recur resequencer status`` and the exporter read them."""

from __future__ import annotations

import itertools
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from config import keys
from config.settings import load_settings
from routing.intake import submit
from routing.reseq.pace import SLEEP_AT_MOST
from routing.reseq.sender import run_sender
from routing.reseq.state import Resequencer
from tasks.cli import cli
from tests.support.processes import wait_for
from tests.support.receiver import Receiver
from tests.support.resequencer_rig import Rig, rig_environment

pytestmark = pytest.mark.services


def most_in_a_second(times: list[float]) -> int:
    """The most of ``times`` in any 1-second window."""
    times, first, most = sorted(times), 0, 0
    for i, t in enumerate(times):
        while times[first] <= t - 1.0:
            first += 1
        most = max(most, i - first + 1)
    return most


def tries(receiver: Receiver, dest: str) -> list[float]:
    """When each POST to ``dest`` came, whatever it was answered."""
    with receiver.lock:
        return [t for d, _, t in receiver.requests if d == dest]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as r:
        yield r


@pytest.fixture
def dest() -> str:
    return f"r-{uuid.uuid4().hex[:8]}"


def limited(redis_client: redis.Redis, receiver: Receiver, dest: str, rate: str,
            **extra: str) -> Resequencer:
    cfg = load_settings({**os.environ,
                         "RECUR_DESTINATIONS": f"{dest}:{receiver.url(dest)} {rate}",
                         "RECUR_SEND_TIMEOUT": "1", **extra})
    return Resequencer(redis_client, cfg)


def fill(reseq: Resequencer, dest: str, count: int) -> None:
    first = reseq.assign(dest, [f"m{i}" for i in range(1, count + 1)])
    for i in range(1, count + 1):
        message = {"id": f"m{i}", "user_id": "u1", "bucket": "short", "payload": {"i": i}}
        reseq.deposit(dest, first + i - 1, {"id": f"m{i}", "result": {"i": i},
                                            "message": message})


def test_sends_keep_to_the_rate_in_order_and_the_waits_are_counted(
        redis_client: redis.Redis, receiver: Receiver, dest: str) -> None:
    reseq = limited(redis_client, receiver, dest, "rate=10/s burst=2")
    fill(reseq, dest, 30)
    woken: list[float] = []
    started = time.monotonic()
    wait_for(lambda: run_sender(reseq, dest, woken.append) == "idle", 20, "every send")
    took = time.monotonic() - started
    assert receiver.seqs(dest) == list(range(1, 31))  # each once, in arrival order
    assert most_in_a_second(tries(receiver, dest)) <= 10 + 2
    assert took >= (30 - 2) / 10 - 0.1  # 28 sends past the burst at 10/s
    assert woken == []  # waits of 0.1 s are slept in the sender, no run booked
    status = reseq.status(dest)
    assert (status.sent, status.skipped, status.dead_lettered) == (30, 0, 0)
    assert status.rate_waits >= 20  # nearly every send past the burst waited its slot
    shown = CliRunner().invoke(cli, ["resequencer", "status", dest])
    assert shown.exit_code == 0 and f"rate_waits={status.rate_waits} " in shown.output


def test_a_far_slot_books_a_run_and_keeps_the_lease_until_it(
        redis_client: redis.Redis, receiver: Receiver, dest: str) -> None:
    reseq = limited(redis_client, receiver, dest, "rate=40/m")  # one send every 1.5 s
    fill(reseq, dest, 3)
    woken: list[float] = []
    assert run_sender(reseq, dest, woken.append) == "paced"  # seq 1 went, seq 2 waits
    assert receiver.seqs(dest) == [1]
    [wait] = woken
    assert SLEEP_AT_MOST < wait <= 1.5
    held = redis_client.pttl(keys.reseq(reseq.cfg.key_prefix, dest, "sender"))
    assert 0 < held <= wait * 1000 + 50  # no other sender starts before the slot
    assert run_sender(reseq, dest, woken.append) == "busy"  # a deposit's kick meanwhile
    time.sleep(wait)
    wait_for(lambda: run_sender(reseq, dest, woken.append) == "paced", 5, "seq 2 sent")
    wait_for(lambda: run_sender(reseq, dest, woken.append) == "idle", 5, "seq 3 sent")
    assert receiver.seqs(dest) == [1, 2, 3]
    times = [r.at for r in receiver.of(dest)]
    # Stamped by the receiver's handler thread: on a loaded 2-core machine a POST can
    # reach it some 0.1 s after its slot; a pacer ignoring the slot sends ~0 s apart.
    assert min(b - a for a, b in itertools.pairwise(times)) >= 1.5 - 0.15
    assert reseq.status(dest).dead_lettered == 0


def test_retries_take_slots_too(redis_client: redis.Redis, receiver: Receiver,
                                dest: str) -> None:
    reseq = limited(redis_client, receiver, dest, "rate=5/s", RECUR_SEND_RETRIES="8",
                    RECUR_SEND_BACKOFF="0.01", RECUR_SEND_BACKOFF_MAX="0.02")
    fill(reseq, dest, 4)
    receiver.set(dest, status=429)  # "too many requests": retried, each try paced
    assert run_sender(reseq, dest, lambda _: None) == "backoff"
    assert len(receiver.refused_seqs(dest, 429)) == 9  # 1 + 8 retries, ~1.6 s
    receiver.set(dest, status=0)
    wait_for(lambda: run_sender(reseq, dest, lambda _: None) == "idle", 10, "every send")
    assert receiver.seqs(dest) == [1, 2, 3, 4]
    assert most_in_a_second(tries(receiver, dest)) <= 5 + 1


@pytest.fixture
def rig(celery_app: Any, receiver: Receiver, dest: str, tmp_path: Path) -> Iterator[Rig]:
    env = rig_environment(receiver, [dest], send_timeout="2")
    env["RECUR_DESTINATIONS"] += " rate=8/s burst=2"
    rig = Rig(celery_app, env, tmp_path / "logs")
    try:
        yield rig
    finally:
        rig.close()


def test_workers_send_a_limited_destination_in_order_within_its_rate(
        rig: Rig, receiver: Receiver, dest: str, redis_client: redis.Redis) -> None:
    rig.processing_worker(2)
    rig.sender_worker(4)
    ids = [f"p-{uuid.uuid4().hex[:6]}-{i}" for i in range(40)]
    for ident in ids:
        submit(dest, {"id": ident, "user_id": "u1", "bucket": "short",
                      "payload": {"v": ident}}, cfg=rig.cfg)
    wait_for(lambda: len(receiver.of(dest)) >= 40, 60, "every send")
    assert [r.body["id"] for r in receiver.of(dest)] == ids  # in arrival order, each once
    assert most_in_a_second(tries(receiver, dest)) <= 8 + 2
    status = Resequencer(redis_client, rig.cfg).status(dest)
    assert status.rate_waits > 0 and (status.sent, status.dead_lettered) == (40, 0)
