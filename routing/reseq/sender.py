"""The sender: sends a destination's ready messages strictly in sequence order.

At most one sender runs per destination: it holds the destination's lease (a
Redis key with its token, a short TTL renewed by a heartbeat while it runs, and
a fence sent with every POST: see :mod:`routing.reseq.lease`). It sends ``sent + 1``
and records it atomically, then the next, until the next one is not processed
yet. What the destination's answer means is its policy's word
(config/destination_policy.py):

* an outage (401, 403, 404, 410, a redirect) or a send that keeps failing
  (5xx, timeouts) holds the destination: the sender keeps its place and backs
  off, nothing after it goes out, nothing is skipped; the outage is recorded
  and said once (routing/reseq/outage.py);
* a refusal of the message itself (400, 413, 422, ...), a message whose
  processing failed for good, or one for a destination this sender does not
  know, is set aside in the destination's dead letter, durably and replayably
  (routing/reseq/dead_letters.py), and the sender goes on in order.

A gap (a missing sequence number with later ones ready behind it) still open
after RECUR_RESEQ_GAP_TIMEOUT is skipped, recorded and logged, so the
destination never blocks forever. The timeout runs from when the gap is first
seen, as in Camel's stream resequencer, so a backlog in the processing queues
(which keeps arrival order) is not mistaken for a lost message. A sender that
has to wait (a gap not yet timed out, a destination that stays down, another
sender's lease) books a delayed run of itself through ``wake`` instead of
sleeping on it. A destination with a rate (``RECUR_DESTINATIONS``: ``rate=10/s``) has
every try of a send wait for its slot first (routing/reseq/pace.py): a near slot is
slept for, a far one is a booked run of the sender, the lease kept until it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from functools import partial

from config.destination_policy import Verdict
from config.errors import ServiceUnavailable
from routing import tracing
from routing.reseq.dead_letters import DeadLetter, letter, publish
from routing.reseq.hold import observe_hold
from routing.reseq.lease import Heartbeat, holder_token
from routing.reseq.outage import answered, held_back
from routing.reseq.outbound import Answer, Delivery, post_with_retries
from routing.reseq.pace import slot_wait
from routing.reseq.state import Next, Resequencer, skip_record

log = logging.getLogger(__name__)

#: Books a sender run for the destination in the given number of seconds.
Wake = Callable[[float], None]
#: Puts a dead letter in its destination's queue, confirmed (routing.reseq.dead_letters).
SetAside = Callable[[DeadLetter], None]


class Step(Enum):
    """What one step of the sender loop leads to."""

    NEXT = "next"  # advanced (or the gap filled): look at the next sequence number
    WAIT = "wait"  # nothing to send now: release, unless something became ready
    BACKOFF = "backoff"  # the destination keeps failing: hold it, try again later
    LOST = "lost"  # the lock is gone: stop without touching anything
    PACED = "paced"  # the next send's slot under the destination's rate is far off


#: Seconds one sender run keeps going before it hands its turn back (re-queued at
#: the back of the outbound queue), so a busy destination cannot hold a sender
#: thread while other destinations' runs wait for one.
TURN_SECONDS = 10.0


@dataclass
class Lease:
    """The running sender's hold on its destination, and where its dead letters go."""

    token: str
    fence: int
    set_aside: SetAside
    #: Seconds until the next send's slot, when the run ends waiting for it (Step.PACED).
    paced: float = 0.0


def run_sender(reseq: Resequencer, destination: str, wake: Wake,
               set_aside: SetAside | None = None) -> str:
    """Send what is ready for ``destination``; returns why it stopped.

    ``wake(0)`` asks for another run at once (the turn is over); ``set_aside``
    (default: the broker queue of routing.reseq.dead_letters) keeps refused messages.
    """
    token = holder_token()
    fence = reseq.acquire(destination, token)
    if not fence:
        # Another sender runs (or died holding the lease): look again when it expires.
        wake(max(reseq.lock_left_ms(destination), 50) / 1000)
        return "busy"
    lease = Lease(token, fence, set_aside or partial(publish, reseq.cfg))
    try:
        with Heartbeat(lambda: reseq.extend(destination, token), reseq.cfg) as heartbeat:
            outcome = send_turn(reseq, destination, lease, wake, heartbeat)
        if outcome == "backoff":
            # Keep the lease through the backoff (the heartbeat has stopped): deposits
            # meanwhile leave the destination alone instead of starting a sender that
            # retries at once.
            reseq.extend(destination, token, int(reseq.cfg.send_backoff_max * 1000))
            wake(reseq.cfg.send_backoff_max)
        elif outcome == "paced":  # the same until the slot: the booked run sends it
            reseq.extend(destination, token, max(1, int(lease.paced * 1000)))
            wake(lease.paced)
        return outcome
    except BaseException:
        reseq.release(destination, token, force=True)
        raise


def send_turn(reseq: Resequencer, destination: str, lease: Lease, wake: Wake,
              heartbeat: Heartbeat) -> str:
    """Send step by step until nothing is ready, the destination fails, the lease is
    lost or the turn is over."""
    turn_ends = time.monotonic() + TURN_SECONDS
    while True:
        if heartbeat.lost:
            return "lost"
        heartbeat.step()
        step = send_step(reseq, destination, lease, wake)
        if step is Step.LOST:
            return "lost"
        if step is Step.BACKOFF:
            return "backoff"
        if step is Step.PACED:
            return "paced"
        if step is Step.WAIT and reseq.release(destination, lease.token) != "more":
            return "idle"
        if time.monotonic() > turn_ends:
            reseq.release(destination, lease.token, force=True)
            wake(0)
            return "turn-over"


def send_step(reseq: Resequencer, destination: str, lease: Lease, wake: Wake) -> Step:
    """Handle the next sequence number once."""
    nxt = reseq.peek(destination)
    if nxt.entry is not None:
        return deliver(reseq, destination, lease, nxt)
    if nxt.pending is None or nxt.buffered == 0:
        return Step.WAIT  # nothing assigned past what was sent, or nothing waits behind it
    since = reseq.gap_since(destination, nxt.seq, nxt.now_ms)
    wait_ms = since + reseq.cfg.reseq_gap_timeout * 1000 - nxt.now_ms
    if wait_ms > 0:
        wake(wait_ms / 1000)
        return Step.WAIT
    reason = (f"timeout: not processed {reseq.cfg.reseq_gap_timeout:g}s after later "
              "messages were ready")
    return skip(reseq, destination, lease.token, nxt, reason, only_if_absent=True)


def deliver(reseq: Resequencer, destination: str, lease: Lease, nxt: Next) -> Step:
    """Send the processed entry of ``nxt`` (or set it aside if processing failed)."""
    assert nxt.entry is not None and nxt.pending is not None
    if "failed" in nxt.entry:
        return set_aside(reseq, destination, lease, nxt, f"failed: {nxt.entry['failed']}")
    url = reseq.cfg.destinations.get(destination)
    if url is None:
        return set_aside(reseq, destination, lease, nxt, "not sent: the destination is not "
                         "in this sender's RECUR_DESTINATIONS")
    lease.paced = slot_wait(reseq, destination, nxt.seq)
    if lease.paced > 0:
        return Step.PACED
    delivery = Delivery(destination=destination, seq=nxt.seq, message_id=nxt.entry["id"],
                        arrived_at=nxt.pending["t"] / 1000, result=nxt.entry.get("result"),
                        fence=lease.fence)
    tracing.record("recur.reseq.hold", delivery.arrived_at, destination=destination, seq=nxt.seq)
    with tracing.span("recur.reseq.send", destination=destination, seq=nxt.seq) as span:
        answer = post_with_retries(url, delivery, reseq.cfg,
                                   lambda: reseq.extend(destination, lease.token),
                                   lambda: slot_wait(reseq, destination, nxt.seq) <= 0)
        span.set(status=answer.status if answer is not None else None)
    if answer is None:
        log.warning("destination %s: sender lost its lease before seq %d; another sender "
                    "takes over", destination, nxt.seq)
        return Step.LOST
    return follow(reseq, destination, lease, nxt, answer)


def follow(reseq: Resequencer, destination: str, lease: Lease, nxt: Next,
           answer: Answer) -> Step:
    """Do what the destination's answer to ``nxt`` says."""
    if answer.verdict in (Verdict.OUTAGE, Verdict.RETRY):
        held_back(reseq, destination, nxt.seq, answer)
        return Step.BACKOFF
    if nxt.outage:
        answered(reseq, destination, nxt.seq)
    if answer.verdict is Verdict.DEAD:
        return set_aside(reseq, destination, lease, nxt, f"refused: {answer.describe()}",
                         answer.status)
    observe_hold(destination, nxt, reseq.cfg.metrics_top_destinations)
    return advanced(reseq.advance(destination, lease.token, nxt.seq), destination, nxt.seq)


def set_aside(reseq: Resequencer, destination: str, lease: Lease, nxt: Next, reason: str,
              status: int | None = None) -> Step:
    """Move ``nxt`` to the destination's dead letter (confirmed by the broker first), then
    record it done, so a crash in between sets it aside twice, never loses it."""
    assert nxt.entry is not None
    if not reseq.extend(destination, lease.token):
        return Step.LOST  # another sender holds it now and sends it itself
    dead = letter(destination, nxt.seq, nxt.entry, reason, status)
    try:
        lease.set_aside(dead)
    except ServiceUnavailable as exc:
        log.warning("destination %s: cannot set aside seq %d (%s); it and everything after "
                    "it wait, tried again in %gs", destination, nxt.seq, exc,
                    reseq.cfg.send_backoff_max)
        return Step.BACKOFF
    outcome = reseq.set_aside(destination, lease.token, nxt.seq, status)
    if outcome == "ok":
        log.warning("destination %s: seq %d (message %s) set aside in its dead letter: %s "
                    "(recur dead list --destination %s)", destination, nxt.seq, dead.id,
                    reason, destination)
    return advanced(outcome, destination, nxt.seq)


def skip(reseq: Resequencer, destination: str, token: str, nxt: Next, reason: str,
         only_if_absent: bool = False) -> Step:
    """Skip ``nxt`` for good (a gap that timed out: there is no message to keep):
    recorded, counted and logged."""
    message_id = (nxt.entry or nxt.pending or {}).get("id", "")
    outcome = reseq.advance(destination, token, nxt.seq,
                            skip_record(nxt.seq, message_id, reason), only_if_absent)
    if outcome == "ok":
        log.warning("destination %s: skipped seq %d (message %s): %s", destination, nxt.seq,
                    message_id, reason)
    return advanced(outcome, destination, nxt.seq)


def advanced(outcome: str, destination: str, seq: int) -> Step:
    if outcome in ("ok", "arrived"):
        return Step.NEXT
    log.warning("destination %s: could not record seq %d (%s); stopping this sender",
                destination, seq, outcome)
    return Step.LOST

