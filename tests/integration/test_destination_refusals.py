"""A destination that refuses, end to end: real Redis, RabbitMQ, processing and outbound
worker processes and a real HTTP receiver.

A destination that answers 401 (or 403, 404, 410, a redirect) for a while loses
nothing: its sender holds its place, says so once at ERROR, shows it in ``recur
status`` and the exporter's metrics, and sends everything in order once the
destination accepts again. A refusal of one message (400, 413, 422) sets that
message aside in the destination's dead letter while the others go on in order;
``recur dead list/replay --destination`` shows it and submits it again. One POST
never outlasts RECUR_SEND_TIMEOUT, however slowly the receiver answers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry, generate_latest

from routing.reseq.dead_letters import DeadLetter, list_letters
from routing.reseq.intake import submit, submit_batch
from routing.reseq.state import Resequencer
from tasks.metrics.collector import SystemCollector
from tasks.metrics.destinations import busiest
from tasks.metrics.system import Refresher, Snapshot
from tests.integration.test_cli_errors import run_recur
from tests.support.processes import wait_for
from tests.support.receiver import Receiver
from tests.support.resequencer_rig import Rig, rig_environment
from tests.support.resequencer_work import fail_flag

pytestmark = pytest.mark.services

DESTINATIONS = ["auth", "moved", "gone", "expired", "bad", "strict", "broken", "slowpoke"]
SEND_TIMEOUT = 2.0


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with Receiver() as r:
        yield r


@pytest.fixture(scope="module")
def rig(celery_app: Any, receiver: Receiver,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    """One processing worker (2 processes) and one sender worker (4 threads)."""
    env = rig_environment(receiver, DESTINATIONS, reseq_gap_timeout="30",
                          send_timeout=str(SEND_TIMEOUT), send_retries="1",
                          send_backoff="0.05", send_backoff_max="0.5",
                          destination_policies="strict:outage=400;dead=404")
    rig = Rig(celery_app, env, Path(tmp_path_factory.mktemp("refusal-logs")))
    try:
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


def wait(predicate: Any, timeout: float, what: str, rig: Rig) -> None:
    try:
        wait_for(predicate, timeout, what)
    except TimeoutError:
        print(rig.logs())
        raise


def sender_log(rig: Rig) -> str:
    return rig.children[-1].log()


def dead_letters(celery_app: Any, destination: str) -> list[DeadLetter]:
    with celery_app.connection_for_write() as conn:
        return list_letters(conn, destination)


def exported(rig: Rig, reseq: Resequencer) -> dict[tuple[str, ...], float]:
    """The exporter's destination samples, rendered from what it reads in Redis."""
    refresher = Refresher(rig.cfg)
    figures, seen = busiest(reseq, rig.cfg.metrics_top_destinations)
    refresher.snapshot = Snapshot(destinations=figures, destinations_seen=seen)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SystemCollector(refresher))
    samples: dict[tuple[str, ...], float] = {}
    for metric in registry.collect():
        for sample in metric.samples:
            if sample.name.startswith("recur_destination_"):
                samples[(sample.name, *sample.labels.values())] = sample.value
    assert "recur_destination_outage" in generate_latest(registry).decode()
    return samples


def test_a_401_window_loses_nothing_and_everything_arrives_in_order_once(
        rig: Rig, receiver: Receiver, reseq: Resequencer, fresh_pg_url: str,
        tmp_path: Path) -> None:
    # The measurement: 40 messages while the receiver refuses with 401.
    receiver.set("auth", status=401, body=b'{"error": "token expired"}')
    for i in range(40):
        submit("auth", message(i), rig.cfg)
    wait(lambda: len(receiver.refused_seqs("auth")) >= 4, 30, "four refused tries", rig)
    wait(lambda: reseq.status("auth").buffered == 40, 30, "all 40 processed", rig)
    assert set(receiver.refused_seqs("auth")) == {1}, "a later message went out"
    assert receiver.seqs("auth") == []
    status = reseq.status("auth")
    assert (status.next_seq, status.skipped, status.dead_lettered) == (1, 0, 0)
    assert status.outage is not None and status.outage.status == 401
    shown = run_recur(["status"], {**rig.env, "RECUR_DATABASE_URL": fresh_pg_url}, tmp_path)
    [line] = [x for x in shown.stdout.splitlines() if x.startswith("destination auth in OUTAGE")]
    assert 'HTTP 401 Unauthorized: {"error": "token expired"}' in line
    assert "seq 1 and everything after it wait" in line
    samples = exported(rig, reseq)
    assert samples[("recur_destination_outage", "auth")] == 1
    assert samples[("recur_destination_refusals_total", "auth", "401")] >= 4
    assert sender_log(rig).count("destination auth is in outage") == 1, "not once per outage"

    receiver.set("auth", status=0)
    wait(lambda: len(receiver.seqs("auth")) >= 40, 30, "all 40 at the receiver", rig)
    assert receiver.seqs("auth") == list(range(1, 41))
    assert [r.body["id"] for r in receiver.of("auth")] == [f"m{i}" for i in range(40)]
    wait(lambda: reseq.status("auth").outage is None, 10, "the outage to end", rig)
    status = reseq.status("auth")
    assert (status.sent, status.skipped, status.dead_lettered) == (40, 0, 0)
    assert exported(rig, reseq)[("recur_destination_outage", "auth")] == 0
    assert "destination auth answers again after" in sender_log(rig)
    assert sender_log(rig).count("destination auth is in outage") == 1
    shown = run_recur(["status"], {**rig.env, "RECUR_DATABASE_URL": fresh_pg_url}, tmp_path)
    assert "destination auth in OUTAGE" not in shown.stdout


def test_redirect_not_found_and_gone_windows_hold_their_destinations(
        rig: Rig, receiver: Receiver, reseq: Resequencer) -> None:
    windows = {"moved": 302, "gone": 404, "expired": 410}
    for destination, status in windows.items():
        receiver.set(destination, status=status)
        submit_batch(destination, [message(i) for i in range(10)], rig.cfg)
    for destination in windows:
        wait(lambda d=destination: len(receiver.refused_seqs(d)) >= 2, 30,
             f"two refused tries at {destination}", rig)
    for destination, status in windows.items():
        assert set(receiver.refused_seqs(destination, status)) == {1}, destination
        outage = reseq.status(destination).outage
        assert outage is not None and (outage.status, outage.kind) == (status, "refused")
    assert receiver.seqs("moved") == [], "the redirect was followed"
    for destination in windows:
        receiver.set(destination, status=0)
    for destination in windows:
        wait(lambda d=destination: len(receiver.seqs(d)) >= 10, 30, f"{destination}'s ten",
             rig)
        assert receiver.seqs(destination) == list(range(1, 11))
        status = reseq.status(destination)
        assert (status.sent, status.skipped, status.dead_lettered) == (10, 0, 0)


def test_refused_messages_are_set_aside_the_rest_go_on_and_a_replay_delivers_them(
        rig: Rig, receiver: Receiver, reseq: Resequencer, celery_app: Any,
        tmp_path: Path) -> None:
    for seq, status in ((3, 400), (6, 422), (8, 413)):
        receiver.refuse("bad", seq, status)
    receiver.set("bad", body=b"no such field: x")
    for i in range(10):
        submit("bad", message(i), rig.cfg)
    wait(lambda: reseq.status("bad").next_seq == 11, 30, "all ten handled", rig)
    assert receiver.seqs("bad") == [1, 2, 4, 5, 7, 9, 10]
    status = reseq.status("bad")
    assert (status.sent, status.skipped, status.dead_lettered) == (7, 0, 3)
    assert status.refused == {"400": 1, "422": 1, "413": 1}

    listed = run_recur(["dead", "list", "--destination", "bad"], rig.env, tmp_path)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert [line.split()[:3] for line in lines] == [
        ["seq=3", "id=m2", "status=400"], ["seq=6", "id=m5", "status=422"],
        ["seq=8", "id=m7", "status=413"]]
    assert 'reason="refused: HTTP 400 Bad Request: no such field: x"' in lines[0]
    as_json = run_recur(["dead", "list", "--destination", "bad", "--json"], rig.env, tmp_path)
    docs = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [d["message"] for d in docs] == [message(2), message(5), message(7)]

    replayed = run_recur(["dead", "replay", "--destination", "bad"], rig.env, tmp_path)
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout.splitlines() == [
        "seq 3 (message m2) submitted again as seq 11",
        "seq 6 (message m5) submitted again as seq 12",
        "seq 8 (message m7) submitted again as seq 13",
        "replayed 3 message(s) to destination bad as new arrivals"]
    wait(lambda: len(receiver.seqs("bad")) >= 10, 30, "the three replays", rig)
    assert receiver.seqs("bad") == [1, 2, 4, 5, 7, 9, 10, 11, 12, 13]
    assert [r.body["id"] for r in receiver.of("bad")][-3:] == ["m2", "m5", "m7"]
    assert dead_letters(celery_app, "bad") == []
    empty = run_recur(["dead", "list", "--destination", "bad"], rig.env, tmp_path)
    assert empty.stdout.strip() == "outbound.dead.bad is empty: no dead letters for destination bad"


def test_a_destinations_own_policy_decides_outage_and_dead_letter(
        rig: Rig, receiver: Receiver, reseq: Resequencer, celery_app: Any) -> None:
    # strict:outage=400;dead=404 (the defaults are the other way round)
    receiver.set("strict", status=400)
    receiver.refuse("strict", 2, 404)
    submit_batch("strict", [message(i) for i in range(3)], rig.cfg)
    wait(lambda: len(receiver.refused_seqs("strict", 400)) >= 2, 30, "two 400s", rig)
    assert set(receiver.refused_seqs("strict")) == {1} and dead_letters(celery_app, "strict") == []
    receiver.set("strict", status=0)
    wait(lambda: reseq.status("strict").next_seq == 4, 30, "all three handled", rig)
    assert receiver.seqs("strict") == [1, 3]
    [dead] = dead_letters(celery_app, "strict")
    assert (dead.seq, dead.status) == (2, 404)


def test_a_message_whose_step_failed_is_set_aside_and_replayed_once_it_is_fixed(
        rig: Rig, receiver: Receiver, reseq: Resequencer, redis_client: redis.Redis,
        celery_app: Any, tmp_path: Path) -> None:
    redis_client.set(fail_flag("bug-17"), 1)
    for i in range(4):
        submit("broken", message(i, **({"fail_while": "bug-17"} if i == 1 else {})), rig.cfg)
    wait(lambda: reseq.status("broken").next_seq == 5, 30, "all four handled", rig)
    assert receiver.seqs("broken") == [1, 3, 4]
    [dead] = dead_letters(celery_app, "broken")
    assert dead.seq == 2 and dead.status is None
    assert dead.reason == "failed: ValueError: processing m1 fails while bug-17"
    redis_client.delete(fail_flag("bug-17"))
    replayed = run_recur(["dead", "replay", "--destination", "broken"], rig.env, tmp_path)
    assert replayed.returncode == 0, replayed.stderr
    wait(lambda: len(receiver.seqs("broken")) >= 4, 30, "the replay", rig)
    assert receiver.seqs("broken") == [1, 3, 4, 5] and receiver.of("broken")[-1].body["id"] == "m1"


def test_a_trickling_receiver_holds_the_sender_no_longer_than_the_send_timeout(
        rig: Rig, receiver: Receiver, reseq: Resequencer) -> None:
    receiver.set("slowpoke", trickle=0.4)  # each byte in time; the whole answer ~40 s
    submit_batch("slowpoke", [message(i) for i in range(3)], rig.cfg)
    wait(lambda: any(t.hung_up for t in receiver.trickled), 30, "the sender to give up", rig)
    first = next(t for t in receiver.trickled if t.hung_up)
    assert first.hung_up is not None and first.hung_up - first.started <= SEND_TIMEOUT + 1.5
    wait(lambda: reseq.status("slowpoke").outage is not None, 30, "the outage on record", rig)
    outage = reseq.status("slowpoke").outage
    assert outage is not None and outage.kind == "unavailable" and outage.status == 0
    assert f"no complete answer within {SEND_TIMEOUT:g}s" in outage.reason
    receiver.set("slowpoke", trickle=0)
    wait(lambda: len(receiver.seqs("slowpoke")) >= 3, 30, "the three", rig)
    assert receiver.seqs("slowpoke") == [1, 2, 3]
