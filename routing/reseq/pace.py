"""A destination's own rate (``RECUR_DESTINATIONS``: ``name:url rate=10/s burst=5``):
its sender never POSTs faster than that.

Before every try of a send (the first and each retry) the sender asks routing/gcra.lua,
the script ``@rate_limit`` uses, with Redis' clock, for the destination's one key
(``<prefix>:reseq:{<d>}:rate``) and the sequence number as the job. A send over the
rate is given the destination's next free slot (kept for that sequence number, so the
sender that sends it next, this one or another after a crash, finds it). Then:

* a slot at most ``SLEEP_AT_MOST`` away: the sender sleeps until it, keeping its lease
  (the heartbeat renews it): one Redis call and one sleep per send, no spin;
* a slot further away: the sender keeps its lease until the slot and books its own run
  for then (``Step.PACED``), like a backoff, and frees its thread meanwhile.

Nothing is reordered (one sender per destination sends ``sent + 1`` only) and nothing
is set aside for waiting. Each send that had to wait is counted once in the
destination's stats hash (``deferred:rate``): ``recur resequencer status`` and the
exporter show it as the destination's rate waits.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from config import keys
from config.destinations import rate_of
from config.rates import Rate
from routing.redis_client import GCRA
from routing.reseq.state import RATE_WAITS, Resequencer, redis_errors

#: Longest wait for a slot the sender sleeps through holding its thread; a longer one
#: books a run of the sender for the slot instead.
SLEEP_AT_MOST = 1.0
#: The label gcra.lua counts a destination's waits under, in its stats hash: deferred:rate
#: (state.RATE_WAITS, sends that waited, ever) and waiting:rate (holding a slot now).
LABEL = RATE_WAITS.partition(":")[2]


def ask(reseq: Resequencer, destination: str, seq: int, rate: Rate) -> float:
    """0.0 when ``seq`` may be sent now (its slot is taken); else seconds to its slot,
    reserved for it. ServiceUnavailable if Redis fails."""
    prefix = reseq.cfg.key_prefix
    with redis_errors(f"ask the rate of {destination}"):
        allowed, wait_ms, _reserved = GCRA(
            reseq.client, [keys.reseq(prefix, destination, "rate"),
                           keys.reseq(prefix, destination, "stats")],
            repr(rate.interval_ms), rate.burst, str(seq), LABEL)
    return 0.0 if allowed else int(wait_ms) / 1000.0


def slot_wait(reseq: Resequencer, destination: str, seq: int,
              sleep: Callable[[float], None] = time.sleep) -> float:
    """Wait for ``seq``'s slot under the destination's rate: 0.0 once it may be sent
    (having slept for a slot at most SLEEP_AT_MOST away), else the seconds until its
    slot, which is kept for it (the caller books its run for then)."""
    rate = rate_of(reseq.cfg.destinations, destination)
    if rate is None:
        return 0.0
    while True:
        wait = ask(reseq, destination, seq, rate)
        if wait <= 0 or wait > SLEEP_AT_MOST:
            return wait
        sleep(wait)
