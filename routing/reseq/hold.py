"""``recur_resequencer_hold_seconds``: how long a message was in the resequencer before
its send, per destination.

A message's hold runs from its arrival (its sequence number, Redis' clock at intake)
to the moment the sender took it to send (Redis' clock at that read), so it is one
clock and no extra round trip: processing, waiting behind an earlier message and
waiting for a sender are all in it; the destination's own answer time is not.
Observed once per message the destination accepted (sender.py), in the sending
worker's process. Labels are bounded: a process names at most
RECUR_METRICS_TOP_DESTINATIONS destinations, the first it sends to, and counts the
rest under ``destination="_other"``.
"""

from __future__ import annotations

import threading

from config.lazy_metrics import histogram
from routing.reseq.state import Next

OTHER = "_other"
#: From a message sent at once to one held behind a gap up to the gap timeout and past.
HOLD_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)
HOLD = histogram("recur_resequencer_hold_seconds", "Seconds from a message's arrival in the "
                 "resequencer to its send, by destination (_other: past the named ones).",
                 ["destination"], buckets=HOLD_BUCKETS)
_named: set[str] = set()
_lock = threading.Lock()


def observe_hold(destination: str, nxt: Next, top: int) -> None:
    """Count the hold of ``nxt``, about to be recorded as sent."""
    if nxt.pending is None:
        return
    held = max(0.0, (nxt.now_ms - int(nxt.pending.get("t", nxt.now_ms))) / 1000)
    HOLD.labels(label(destination, top)).observe(held)


def label(destination: str, top: int) -> str:
    """The destination's own label while this process names fewer than ``top``."""
    if destination in _named:
        return destination
    with _lock:
        if len(_named) < top:
            _named.add(destination)
            return destination
    return OTHER
