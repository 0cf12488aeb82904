"""A destination that holds its messages back: an outage, said once, shown while it lasts.

When a destination's answer is an outage (401, 404, a redirect, ...: see
config/destination_policy.py) or every try of a send failed (5xx, timeouts),
the sender keeps its place and backs off. Each such try is recorded in the
destination's outage hash in Redis (``config.keys.reseq_outage``: since,
status, reason, tries, the waiting sequence number), with a TTL so a record
nobody renews goes by itself. The try that opens an outage is logged once, at
ERROR for a refusal (someone must act: a token, an address) and at WARNING
for unavailability (it usually passes by itself); later tries are DEBUG, a
change of status a WARNING, and the first answer that is not an outage ends
it with a WARNING saying how long it lasted. ``recur status`` names the
destinations in outage, and the exporter exports ``recur_destination_outage``
and ``recur_destination_refusals_total`` from the same records.
"""

from __future__ import annotations

import logging
import time

from config.destination_policy import Verdict
from config.settings import Settings
from routing.reseq.lease import step_limit_seconds
from routing.reseq.outbound import Answer
from routing.reseq.state import Resequencer

log = logging.getLogger(__name__)


def outage_ttl_ms(cfg: Settings) -> int:
    """How long an outage record outlives its last try: two whole sender steps (every
    try and wait one may take) and a backoff. Past it nobody is trying any more."""
    return int((2 * step_limit_seconds(cfg) + cfg.send_backoff_max) * 1000)


def held_back(reseq: Resequencer, destination: str, seq: int, answer: Answer) -> None:
    """Record a try the destination held back; say so once per outage."""
    kind = "refused" if answer.verdict is Verdict.OUTAGE else "unavailable"
    state = reseq.mark_outage(destination, answer.status, answer.describe(), seq, kind,
                              answer.tries, outage_ttl_ms(reseq.cfg))
    every = reseq.cfg.send_backoff_max
    if state == "new" and kind == "refused":
        log.error("destination %s is in outage: it answered %s, which says it (or our "
                  "credentials for it) is not ready; seq %d and everything after it wait, "
                  "tried again every %gs until it accepts, nothing is skipped",
                  destination, answer.describe(), seq, every)
    elif state == "new":
        log.warning("destination %s is unavailable (%s, %d tries); seq %d and everything "
                    "after it wait, tried again every %gs", destination, answer.describe(),
                    answer.tries, seq, every)
    elif state == "changed":
        log.warning("destination %s is still in outage, now: %s (seq %d waits)",
                    destination, answer.describe(), seq)
    else:
        log.debug("destination %s still in outage: %s (seq %d waits)", destination,
                  answer.describe(), seq)


def answered(reseq: Resequencer, destination: str, seq: int) -> None:
    """The destination answered (not an outage): end its outage, saying how long it was."""
    ended = reseq.end_outage(destination)
    if ended is None:
        return
    since, tries, status = ended
    log.warning("destination %s answers again after %.1fs in outage (%d tries held back, "
                "last HTTP %s); sending from seq %d", destination, time.time() - since, tries,
                status or "none", seq)
