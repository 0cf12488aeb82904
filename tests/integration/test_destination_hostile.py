"""Answers nobody lists, from the real HTTP receiver (``raw``): each is one class of
config/destination_policy.py, never an exception out of the send, never a hang past
RECUR_SEND_TIMEOUT, never a reason longer than a line; and a Retry-After, whatever it
says, neither stretches nor shortens the sender's own backoff (no wedge, no spin)."""

from __future__ import annotations

import time

import pytest

from config import keys
from config.destination_policy import Verdict
from routing.reseq.outbound import DETAIL_CHARS, Delivery, answer_once
from routing.reseq.sender import run_sender
from routing.reseq.state import Resequencer
from tests.integration import test_destination_sender as base
from tests.support.receiver import Receiver

pytestmark = pytest.mark.services
#: That module's fixtures (its receiver, a fresh destination, a 1 s timeout, 1 retry).
receiver, dest, reseq, fill, run_until = (base.receiver, base.dest, base.reseq, base.fill,
                                          base.run_until)

CLOSE = b"Connection: close\r\nContent-Length: 0\r\n\r\n"
#: (name, raw answer, status, verdict): the status 0 is no usable answer.
ANSWERS = [
    ("100 then 200", b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n" + CLOSE, 200,
     Verdict.SENT),
    ("a lone 100", b"HTTP/1.1 100 Continue\r\n\r\n", 0, Verdict.RETRY),
    ("101 unasked", b"HTTP/1.1 101 Switching\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n",
     0, Verdict.RETRY),
    ("204", b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n", 204, Verdict.SENT),
    ("304", b"HTTP/1.1 304 Not Modified\r\nConnection: close\r\n\r\n", 304, Verdict.OUTAGE),
    ("301 without Location", b"HTTP/1.1 301 Moved\r\n" + CLOSE, 301, Verdict.OUTAGE),
    ("418", b"HTTP/1.1 418 Teapot\r\n" + CLOSE, 418, Verdict.DEAD),
    ("451", b"HTTP/1.1 451 Legal\r\n" + CLOSE, 451, Verdict.DEAD),
    ("499", b"HTTP/1.1 499 Closed\r\n" + CLOSE, 499, Verdict.DEAD),
    ("599", b"HTTP/1.1 599 Odd\r\n" + CLOSE, 599, Verdict.RETRY),
    ("999", b"HTTP/1.1 999 Odd\r\n" + CLOSE, 999, Verdict.OUTAGE),
    ("status 000", b"HTTP/1.1 000 Zero\r\n" + CLOSE, 0, Verdict.RETRY),
    ("invalid status line", b"HTTP/1.1 OK FINE\r\n\r\n", 0, Verdict.RETRY),
    ("no HTTP at all", b"\x00\xff\x16\x03\x01 hello", 0, Verdict.RETRY),
    ("closed mid-headers", b"HTTP/1.1 200 OK\r\nContent-Le", 0, Verdict.RETRY),
    ("bad chunk", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\nabc\r\n", 0,
     Verdict.RETRY),
    ("short body", b"HTTP/1.1 422 X\r\nContent-Length: 100\r\n\r\nabc", 0, Verdict.RETRY),
    ("two lengths", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", 0,
     Verdict.RETRY),
    ("a 60 KB reason phrase", b"HTTP/1.1 400 " + b"R\t" * 30000 + b"\r\n" + CLOSE, 400,
     Verdict.DEAD),
    ("never answers", b"hang", 0, Verdict.RETRY),
]


def test_every_hostile_answer_is_one_class_within_the_timeout_and_one_short_line(
        reseq: Resequencer, dest: str, receiver: Receiver) -> None:
    url = reseq.cfg.destinations[dest]
    for name, raw, status, verdict in ANSWERS:
        receiver.set(dest, raw=raw)
        started = time.monotonic()
        answer = answer_once(url, Delivery(dest, 1, "m1", 0.0, None), reseq.cfg)
        took = time.monotonic() - started
        assert (answer.status, answer.verdict) == (status, verdict), name
        assert took < 2.5, f"{name}: {took:.1f}s against a 1 s timeout"
        assert len(answer.describe()) < 3 * DETAIL_CHARS, f"{name}: a reason of " \
            f"{len(answer.describe())} characters"
        assert answer.describe().isprintable(), name
    # TLS to a plain port, and a host no resolver can encode (a URL built past the
    # settings' check), are no answer, not an exception out of the sender's task.
    for bad in (url.replace("http://", "https://"), "http://xn--bad-.test/in",
                "http://" + "a" * 64 + ".test/in"):
        answer = answer_once(bad, Delivery(dest, 1, "m1", 0.0, None), reseq.cfg)
        assert (answer.status, answer.verdict) == (0, Verdict.RETRY), bad


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_whatever_it_says_changes_nothing(reseq: Resequencer, dest: str,
                                                      receiver: Receiver, status: int) -> None:
    fill(reseq, dest, 3)
    lock = keys.reseq(reseq.cfg.key_prefix, dest, "sender")
    backoff_ms = reseq.cfg.send_backoff_max * 1000
    values = ["-1", "0", "1000000000000", "0.5", "NaN", "soon",
              "Wed, 21 Oct 2015 07:28:00 GMT", "Fri, 31 Dec 9999 23:59:59 GMT",
              "1\r\nRetry-After: 99999"]
    for runs, value in enumerate(values, start=1):
        receiver.set(dest, raw=f"HTTP/1.1 {status} Busy\r\nRetry-After: {value}\r\n".encode()
                     + CLOSE)
        started, booked = time.monotonic(), []
        assert run_sender(reseq, dest, booked.append) == "backoff", value
        assert time.monotonic() - started < 2.5, value
        # Its next run, and its lease, wait the sender's own backoff, as after any failure.
        assert booked == [reseq.cfg.send_backoff_max], value
        assert reseq.client.pttl(lock) <= backoff_ms, value
        # One try and RECUR_SEND_RETRIES=1 retry per run, all of seq 1: no spin.
        assert [seq for _d, seq, _t in receiver.requests] == [1] * 2 * runs, value
        reseq.client.delete(lock)  # the booked run would find it expired
    receiver.set(dest, raw=b"")
    run_until(reseq, dest, "idle")
    assert receiver.seqs(dest) == [1, 2, 3]
    assert reseq.status(dest).outage is None
